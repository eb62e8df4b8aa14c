package jsonbody

import (
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil/depcheck"
)

// TestLeaf: this package links the standard library only, and not net/http:
// the agent's light client links it (through agent/request).
func TestLeaf(t *testing.T) {
	depcheck.Check(t, ".", depcheck.Allow{NeverStd: []string{"net/http"}})
}
