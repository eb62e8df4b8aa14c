package jobs

import (
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// TestImports: the registration is handed the function that asks one node;
// HTTP and the Service are not its business. This test fails when a file
// of the package imports net/http, the HTTP edge or the aggregator's root
// package.
func TestImports(t *testing.T) {
	testutil.RefuseImports(t, "the jobs' registration", "it is handed the function that asks one node",
		"net/http", testutil.AggregatorRoot+"/httpapi", testutil.AggregatorRoot)
}
