package probe

import (
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// TestImportsNoWireTypes: the schedule decides on the view's input; the
// probe's Control, HTTP and the Service are not its business. This test
// fails when a file of the package imports the protobuf types, net/http,
// aggregator/api or the aggregator's root package.
func TestImportsNoWireTypes(t *testing.T) {
	testutil.RefuseImports(t, "the probes' schedule", "it decides on the view's input; the Service sends the probes",
		testutil.WireTypes, testutil.Protobuf, "net/http", testutil.AggregatorAPI, testutil.AggregatorRoot)
}
