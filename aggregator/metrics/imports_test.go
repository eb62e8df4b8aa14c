package metrics

import (
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// TestImportsNoWireTypes: the metrics are fed plain values and read the
// Service through Source; the mesh's wire types, HTTP and the Service
// itself are not theirs. This test fails when a file of the package
// imports the protobuf types, net/http or the aggregator's root package.
func TestImportsNoWireTypes(t *testing.T) {
	testutil.RefuseImports(t, "the aggregator's metrics", "feed them plain values, or read the Service through Source",
		testutil.WireTypes, testutil.Protobuf, "net/http", testutil.AggregatorRoot)
}
