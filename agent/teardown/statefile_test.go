package teardown

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/testutil"
)

// smallTmpfs mounts a tmpfs of size bytes on a temporary directory and
// unmounts it when the test ends (needs root: skipped without, failed in
// CI).
func smallTmpfs(t *testing.T, size int) string {
	t.Helper()
	testutil.RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("gwtest", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		testutil.Require(t, false, fmt.Sprintf("cannot mount a tmpfs: %v", err))
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes a file in dir until the file system is full and returns it.
func fill(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v, want ENOSPC", dir, err)
			}
			return p
		}
	}
}

// TestStateWriteFailureOnAFullDisk: on a real full file system the state
// file's failure is logged once per streak (not per write), shown in the
// status with the error, told as events, retried, and cleared once a write
// succeeds.
func TestStateWriteFailureOnAFullDisk(t *testing.T) {
	dir := smallTmpfs(t, 256<<10)
	logs := &testutil.SyncBuffer{}
	events := &eventLog{}
	h := &harness{t: t, clk: clock.NewFake(t0), cg: newFakeCgroups(), diag: &fakeDiagnoser{}, dir: dir}
	h.start(func(o *Options) {
		o.Logger = slog.New(slog.NewTextHandler(logs, nil))
		o.OnEvent = events.add
	})
	filler := fill(t, dir)
	h.start1("7", t0.Add(time.Hour).Format(time.RFC3339), "", "")
	st := h.status()
	if st.StateFile == nil || !strings.Contains(st.StateFile.Error, "no space left on device") || st.StateFile.Path != filepath.Join(dir, "state.json") {
		t.Fatalf("status after a failed write: state_file_error %+v, want ENOSPC on %s/state.json", st.StateFile, dir)
	}
	for i := range 50 {
		if _, err := h.s.Drain(context.Background(), fmt.Sprintf("r%d", i), "t"); err != nil {
			t.Fatal(err)
		}
	}
	st = h.status()
	if st.StateFile == nil || st.StateFile.Failures < 51 {
		t.Fatalf("state_file_error %+v after 51 failed writes", st.StateFile)
	}
	if n := strings.Count(logs.String(), "cannot write the state file"); n != 1 {
		t.Fatalf("%d log lines for one streak of failures, want 1:\n%s", n, logs)
	}
	n := 0
	for _, l := range events.lines() {
		if strings.HasPrefix(l, string(EventStateWriteError)) {
			n++
		}
	}
	if n < 51 {
		t.Fatalf("%d state write error events, want one per failed write (51)", n)
	}
	// Space again: the retry writes what memory holds, without any event.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	h.advance(stateRetryAfter)
	st = h.status()
	if st.StateFile != nil {
		t.Fatalf("state_file_error %+v after the space came back", st.StateFile)
	}
	data, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil || !strings.Contains(string(data), `"id":"7"`) || !strings.Contains(string(data), "r49") {
		t.Fatalf("state file after the retry: %v\n%s", err, data)
	}
	if !strings.Contains(logs.String(), "state file written again") {
		t.Errorf("the recovery was not logged:\n%s", logs)
	}
	if l := events.lines(); l[len(l)-1] != string(EventStateWriteRecovered)+" " {
		t.Errorf("last event %q, want %s", l[len(l)-1], EventStateWriteRecovered)
	}
}
