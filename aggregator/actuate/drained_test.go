package actuate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/clock"
)

// A drained set written by an older release may hold names that are not
// node names: they are dropped with a warning, the valid ones kept.
func TestDrainedSetDropsInvalidNames(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, DrainedFile), []byte(`{"drained": ["n1", "node[1-2]", "", "ALL", "n2"]}`), 0o640); err != nil {
		t.Fatal(err)
	}
	names, invalid, err := LoadDrained(dir)
	if err != nil || strings.Join(names, ",") != "n1,n2" || len(invalid) != 3 {
		t.Fatalf("loadDrained: %q, %q, %v; want n1,n2 and 3 invalid", names, invalid, err)
	}
	a := New([]Config{{On: OnDown, Command: []string{"/bin/true"}}}, clock.NewFake(t0), time.Second, testLogger(t))
	t.Cleanup(a.Stop)
	if err := a.Remember(dir); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	_, bad := a.nodes["node[1-2]"]
	_, good := a.nodes["n2"]
	a.mu.Unlock()
	if bad || !good {
		t.Errorf("actuators remember node[1-2]: %v, n2: %v", bad, good)
	}
}
