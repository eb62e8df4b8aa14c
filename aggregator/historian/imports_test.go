package historian

import (
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// TestImports: the historian reads a node's own update as the mesh
// carries it (the history keeps what the node said), and nothing of HTTP
// or of the Service: it is handed the view's nodes and the cluster's G.
// This test fails when a file of the package imports net/http, the HTTP
// API's types, the HTTP edge or the aggregator's root package.
func TestImports(t *testing.T) {
	testutil.RefuseImports(t, "the historian", "it is handed the view's nodes and the cluster's G",
		"net/http", testutil.AggregatorAPI, testutil.AggregatorRoot+"/httpapi", testutil.AggregatorRoot)
}
