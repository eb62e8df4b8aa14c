package meshfake

import (
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// TestImportsMeshOnly: the fake fakes the mesh, nothing of the aggregator:
// this test fails when a file of the package imports one of the
// aggregator's packages (the Service's tests import this one).
func TestImportsMeshOnly(t *testing.T) {
	testutil.RefuseImports(t, "the mesh fake", "it fakes the mesh only",
		testutil.AggregatorRoot+"/...")
}
