package incidents

import (
	"strings"
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// TestImportsNoWireTypes: the tracker works on the view's nodes and asks
// the Service through Deps; the mesh's wire types, HTTP and its API types
// are the Service's. This test fails when a file of the package imports
// the protobuf types, net/http, aggregator/api or the aggregator's root
// package.
func TestImportsNoWireTypes(t *testing.T) {
	for _, path := range testutil.Imports(t) {
		if strings.HasSuffix(path, "/proto/gwpb") || strings.HasPrefix(path, "google.golang.org/protobuf") || path == "net/http" ||
			strings.HasSuffix(path, "/aggregator/api") || path == "github.com/gracewatch/gracewatch/aggregator" {
			t.Errorf("the incidents' tracker imports %s", path)
		}
	}
}
