package httpapi

import (
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// TestImportsNoWireTypes: the HTTP edge speaks the HTTP API's types
// (aggregator/api) and asks the Service only through its Service
// interface; the mesh's wire types are the Service's to turn requests
// into (package aggregator, edge.go). This test fails when a file of the
// package imports the protobuf types or the aggregator's root package.
func TestImportsNoWireTypes(t *testing.T) {
	testutil.RefuseImports(t, "the HTTP edge", "it asks the Service (http_service.go), which speaks the mesh's types",
		testutil.WireTypes, testutil.Protobuf, testutil.AggregatorRoot)
}
