package probe

import (
	"strings"
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// TestImportsNoWireTypes: the schedule decides on the view's input; the
// probe's Control, HTTP and the Service are not its business. This test
// fails when a file of the package imports the protobuf types, net/http,
// aggregator/api or the aggregator's root package.
func TestImportsNoWireTypes(t *testing.T) {
	for _, path := range testutil.Imports(t) {
		if strings.HasSuffix(path, "/proto/gwpb") || strings.HasPrefix(path, "google.golang.org/protobuf") || path == "net/http" ||
			strings.HasSuffix(path, "/aggregator/api") || path == "github.com/gracewatch/gracewatch/aggregator" {
			t.Errorf("the probes' schedule imports %s", path)
		}
	}
}
