package view

import (
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// TestImportsNoWireTypes: the view works on the internal node input only;
// the wire's types of a node's state are decoded at the intake and the
// view's output is converted at the HTTP edge. This test fails when a file
// of the package imports the protobuf types, the HTTP API's or net/http.
func TestImportsNoWireTypes(t *testing.T) {
	testutil.RefuseImports(t, "the view", "it works on the node input (nodeinput.go); decode at the intake, convert at the HTTP edge",
		testutil.WireTypes, testutil.Protobuf, testutil.AggregatorAPI, "net/http")
}
