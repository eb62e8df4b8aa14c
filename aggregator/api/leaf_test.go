package api

import (
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil/depcheck"
)

// TestLeaf: this package links the standard library only (and the
// agent's report types, a leaf of their own: /readyz reports the host as a
// report's HostFacts), so that a client can use it without the programs'
// server-side dependencies.
func TestLeaf(t *testing.T) {
	depcheck.Check(t, ".", depcheck.Allow{Packages: []string{"agent/report"}})
}
