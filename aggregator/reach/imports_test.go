package reach

import (
	"strings"
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// TestImportsNoWireTypes: the book holds names and addresses; the mesh,
// its wire types and the Service are not its business. This test fails
// when a file of the package imports the protobuf types, the mesh or one
// of the aggregator's packages.
func TestImportsNoWireTypes(t *testing.T) {
	for _, path := range testutil.Imports(t) {
		if strings.HasSuffix(path, "/proto/gwpb") || strings.HasPrefix(path, "google.golang.org/protobuf") ||
			strings.HasSuffix(path, "/gracewatch/mesh") || strings.HasPrefix(path, "github.com/gracewatch/gracewatch/aggregator") {
			t.Errorf("the reach book imports %s", path)
		}
	}
}
