package relay

import (
	"strings"
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// TestImports: the relay speaks the mesh's Control and ControlAck, and
// nothing of HTTP, of the view or of the Service, which decides whether a
// node may be asked. This test fails when a file of the package imports
// net/http, aggregator/api, aggregator/view or the aggregator's root
// package.
func TestImports(t *testing.T) {
	for _, path := range testutil.Imports(t) {
		if path == "net/http" || strings.HasSuffix(path, "/aggregator/api") || strings.HasSuffix(path, "/aggregator/view") ||
			path == "github.com/gracewatch/gracewatch/aggregator" {
			t.Errorf("the relay imports %s", path)
		}
	}
}
