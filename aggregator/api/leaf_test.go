package api

import (
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil/depcheck"
)

// TestLeaf: this package links the standard library only, so that a
// client can use it without the programs' server-side dependencies.
func TestLeaf(t *testing.T) {
	depcheck.Check(t, ".", depcheck.Allow{})
}
