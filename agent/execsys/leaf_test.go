package execsys

import (
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil/depcheck"
)

// TestLeaf: this package links the standard library only: it runs the
// exec systems' commands and reads their output, and knows nothing of the
// agent that uses it.
func TestLeaf(t *testing.T) {
	depcheck.Check(t, ".", depcheck.Allow{})
}
