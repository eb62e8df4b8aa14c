package request

import (
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil/depcheck"
)

// TestLeaf: this package links the standard library and the JSON error
// classification only (itself a leaf), so that a client can use it without
// the programs' server-side dependencies.
func TestLeaf(t *testing.T) {
	depcheck.Check(t, ".", depcheck.Allow{Packages: []string{"internal/jsonbody"}})
}
