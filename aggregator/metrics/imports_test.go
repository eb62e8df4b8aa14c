package metrics

import (
	"strings"
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// TestImportsNoWireTypes: the metrics are fed plain values and read the
// Service through Source; the mesh's wire types, HTTP and the Service
// itself are not theirs. This test fails when a file of the package
// imports the protobuf types, net/http or the aggregator's root package.
func TestImportsNoWireTypes(t *testing.T) {
	for _, path := range testutil.Imports(t) {
		if strings.HasSuffix(path, "/proto/gwpb") || strings.HasPrefix(path, "google.golang.org/protobuf") ||
			path == "net/http" || path == "github.com/gracewatch/gracewatch/aggregator" {
			t.Errorf("the aggregator's metrics import %s", path)
		}
	}
}
