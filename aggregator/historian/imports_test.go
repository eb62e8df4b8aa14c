package historian

import (
	"strings"
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// TestImports: the historian reads a node's own update as the mesh
// carries it (the history keeps what the node said), and nothing of HTTP
// or of the Service: it is handed the view's nodes and the cluster's G.
// This test fails when a file of the package imports net/http, the HTTP
// API's types or the aggregator's root package.
func TestImports(t *testing.T) {
	for _, path := range testutil.Imports(t) {
		if path == "net/http" || strings.HasSuffix(path, "/aggregator/api") || strings.HasSuffix(path, "/aggregator/httpapi") ||
			path == "github.com/gracewatch/gracewatch/aggregator" {
			t.Errorf("the historian imports %s", path)
		}
	}
}
