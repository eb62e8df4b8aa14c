package incidents

import (
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// TestImportsNoWireTypes: the tracker works on the view's nodes and asks
// the Service through Deps; the mesh's wire types, HTTP and its API types
// are the Service's. This test fails when a file of the package imports
// the protobuf types, net/http, aggregator/api or the aggregator's root
// package.
func TestImportsNoWireTypes(t *testing.T) {
	testutil.RefuseImports(t, "the incidents' tracker", "ask the Service through Deps",
		testutil.WireTypes, testutil.Protobuf, "net/http", testutil.AggregatorAPI, testutil.AggregatorRoot)
}
