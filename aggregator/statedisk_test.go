package aggregator

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gracewatch/gracewatch/aggregator/actuate"
	gwtestutil "github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// A full state disk is an error an operator sees: the drained set that
// cannot be written is logged, counted, and named by /readyz until a later
// write succeeds; nothing already drained is forgotten in memory. A real
// tmpfs of 64 KiB, filled up.
func TestDrainedSetOnAFullDisk(t *testing.T) {
	gwtestutil.RequireRoot(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k", "gwtest-full", state).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", state).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", state, err, out)
		}
	})
	f := newActFixture(t, 0, func(o *Options) { o.StateDir = state })
	f.update("n1", &gwpb.StateUpdate{Meta: downMeta(1, 2, "job 9 hung")})
	f.settle()
	if b, err := os.ReadFile(filepath.Join(state, actuate.DrainedFile)); err != nil || !strings.Contains(string(b), "n1") {
		t.Fatalf("drained set before the disk is full: %q %v", b, err)
	}
	// Fill the file system.
	filler := filepath.Join(state, "filler")
	big := make([]byte, 1<<20)
	fh, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	fh.Write(big)
	fh.Close()

	f.update("n2", &gwpb.StateUpdate{Meta: downMeta(1, 2, "job 10 hung")})
	f.settle()
	r := f.svc.Ready()
	if !strings.Contains(r.StateWriteError, "no space left") || !strings.Contains(r.Detail, "cannot save the drained nodes") {
		t.Errorf("readiness on a full disk: %+v", r)
	}
	if n := counted(t, f.svc, "state_write_failures_total"); n < 1 {
		t.Errorf("state_write_failures_total = %v, want at least 1", n)
	}
	if b, _ := os.ReadFile(filepath.Join(state, actuate.DrainedFile)); strings.Contains(string(b), "n2") {
		t.Fatalf("drained set written on a full disk? %q", b)
	}
	// Space again: the next change saves both, and the error clears.
	os.Remove(filler)
	f.update("n3", &gwpb.StateUpdate{Meta: downMeta(1, 2, "job 11 hung")})
	f.settle()
	b, err := os.ReadFile(filepath.Join(state, actuate.DrainedFile))
	if err != nil || !strings.Contains(string(b), "n1") || !strings.Contains(string(b), "n2") || !strings.Contains(string(b), "n3") {
		t.Fatalf("drained set after space came back: %q %v", b, err)
	}
	if r := f.svc.Ready(); r.StateWriteError != "" {
		t.Errorf("readiness after a successful write: %+v", r)
	}
}
