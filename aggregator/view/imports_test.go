package view

import (
	"strings"
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// TestImportsNoWireTypes: the view works on the internal node input only;
// the wire's types of a node's state are decoded at the intake and the
// view's output is converted at the HTTP edge. This test fails when a file
// of the package imports the protobuf types, the HTTP API's or net/http.
func TestImportsNoWireTypes(t *testing.T) {
	for _, path := range testutil.Imports(t) {
		if strings.HasSuffix(path, "/proto/gwpb") || strings.HasPrefix(path, "google.golang.org/protobuf") ||
			strings.HasSuffix(path, "/aggregator/api") || path == "net/http" {
			t.Errorf("the view imports %s: it works on the node input (nodeinput.go); decode at the intake, convert at the HTTP edge", path)
		}
	}
}
