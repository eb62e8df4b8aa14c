package relay

import (
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// TestImports: the relay speaks the mesh's Control and ControlAck, and
// nothing of HTTP, of the view or of the Service, which decides whether a
// node may be asked. This test fails when a file of the package imports
// net/http, aggregator/api, aggregator/view or the aggregator's root
// package.
func TestImports(t *testing.T) {
	testutil.RefuseImports(t, "the relay", "the Service decides whether a node may be asked",
		"net/http", testutil.AggregatorAPI, testutil.AggregatorRoot+"/view", testutil.AggregatorRoot)
}
