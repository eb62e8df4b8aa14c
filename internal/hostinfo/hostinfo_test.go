package hostinfo

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The load and memory come from the configured proc root (a fixture here),
// the state dir's space from statfs of the real directory.
func TestReadFixture(t *testing.T) {
	dir := t.TempDir()
	r := NewReader(Options{ProcRoot: filepath.Join("testdata", "proc"), StateDir: dir})
	f := r.Read(context.Background())
	if len(f.Errors) > 0 {
		t.Fatalf("errors: %q", f.Errors)
	}
	if f.Load1 != 1.25 || f.Load5 != 0.5 || f.Load15 != 0.1 {
		t.Errorf("load %v %v %v, want 1.25 0.5 0.1 (testdata/proc/loadavg)", f.Load1, f.Load5, f.Load15)
	}
	if f.MemTotalBytes != 24683584*1024 || f.MemAvailableBytes != 20000000*1024 {
		t.Errorf("memory total %d available %d, want the fixture's", f.MemTotalBytes, f.MemAvailableBytes)
	}
	if f.UptimeSeconds == 0 {
		t.Error("uptime 0")
	}
	if f.StateDir != dir || f.StateDirSizeBytes == 0 || f.StateDirFreeBytes > f.StateDirSizeBytes {
		t.Errorf("state dir %q free %d size %d", f.StateDir, f.StateDirFreeBytes, f.StateDirSizeBytes)
	}
}

// What cannot be read is named, and the rest is still there.
func TestReadErrors(t *testing.T) {
	r := NewReader(Options{ProcRoot: t.TempDir(), StateDir: filepath.Join(t.TempDir(), "missing")})
	f := r.Read(context.Background())
	joined := strings.Join(f.Errors, "\n")
	for _, want := range []string{"memory unreadable", "state dir space unreadable: statfs "} {
		if !strings.Contains(joined, want) {
			t.Errorf("errors %q lack %q", f.Errors, want)
		}
	}
	if f.UptimeSeconds == 0 {
		t.Error("uptime 0: sysinfo(2) does not need /proc")
	}
	// Without a state dir nothing is said about one.
	f = NewReader(Options{}).Read(context.Background())
	if f.StateDir != "" || strings.Contains(strings.Join(f.Errors, " "), "state dir") {
		t.Errorf("without a state dir: %+v", f)
	}
	if _, err := os.Stat("/proc/loadavg"); err == nil && f.Load1 == 0 && f.Load5 == 0 && f.Load15 == 0 && len(f.Errors) > 0 {
		t.Errorf("live read: %+v", f)
	}
}
