package meshfake

import (
	"strings"
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// TestImportsMeshOnly: the fake fakes the mesh, nothing of the aggregator:
// this test fails when a file of the package imports one of the
// aggregator's packages (the Service's tests import this one).
func TestImportsMeshOnly(t *testing.T) {
	for _, path := range testutil.Imports(t) {
		if strings.HasPrefix(path, "github.com/gracewatch/gracewatch/aggregator") {
			t.Errorf("the mesh fake imports %s: it fakes the mesh only", path)
		}
	}
}
