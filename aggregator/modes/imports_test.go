package modes

import (
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// TestImportsNoWireTypes: the count is handed the nodes' modes by name;
// the mesh's wire types, HTTP and the Service are not its business. This
// test fails when a file of the package imports the protobuf types,
// net/http, aggregator/api or the aggregator's root package.
func TestImportsNoWireTypes(t *testing.T) {
	testutil.RefuseImports(t, "the modes' count", "it is handed the nodes' modes by name",
		testutil.WireTypes, testutil.Protobuf, "net/http", testutil.AggregatorAPI, testutil.AggregatorRoot)
}
