package reach

import (
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// TestImportsNoWireTypes: the book holds names and addresses; the mesh,
// its wire types and the Service are not its business. This test fails
// when a file of the package imports the protobuf types, the mesh or one
// of the aggregator's packages.
func TestImportsNoWireTypes(t *testing.T) {
	testutil.RefuseImports(t, "the reach book", "it is handed names and addresses",
		testutil.WireTypes, testutil.Protobuf, "github.com/gracewatch/gracewatch/mesh", testutil.AggregatorRoot+"/...")
}
