package cgroup_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/cgroup"
	"github.com/gracewatch/gracewatch/agent/cgroup/cgrouptest"
	"github.com/gracewatch/gracewatch/internal/testutil"
)

// Exec systems on pure cgroup v2 create a job's cgroup after the job is
// registered: Slurm's cgroup/v2 plugin makes
// system.slice/slurmstepd.scope/job_<id> when the first step starts (the
// scope exists while slurmd runs); Flux's sdexec starts each job shell as a
// transient unit of the flux user's systemd instance,
// user.slice/user-<uid>.slice/user@<uid>.service/app.slice/
// imp-shell-<rank>-<id>.service, every level of which may be new.
var pendingLayouts = []struct {
	name     string
	existing []string // levels there before the Watch
	later    []string // levels created after it, one by one
}{
	{"slurm cgroup/v2", []string{"system.slice", "slurmstepd.scope"}, []string{"job_4242"}},
	{"flux sdexec", nil, []string{"user.slice", "user-981.slice", "user@981.service", "app.slice", "imp-shell-0-f2wpPL3uC9.service"}},
}

// TestWatchAwaitsCgroup: a Watch of a v2 cgroup that does not exist yet
// holds one inotify watch, on the nearest existing ancestor, moves it down
// as each level appears, calls back within a second of the cgroup's
// creation, and then follows it as any other watch: populated, emptied.
// Canceled, it leaves no watch.
func TestWatchAwaitsCgroup(t *testing.T) {
	for _, tc := range pendingLayouts {
		t.Run(tc.name, func(t *testing.T) {
			m := newManager(t, cgroup.Options{})
			base := cgrouptest.TempRoot(t)
			dir := base
			for _, l := range tc.existing {
				dir = filepath.Join(dir, l)
				mkdir(t, dir)
			}
			target := filepath.Join(append([]string{dir}, tc.later...)...)
			calls := make(chan time.Time, 64)
			cancel, err := m.Watch(target, func() { calls <- time.Now() })
			if err != nil {
				t.Fatal(err)
			}
			waitWatching(t, m, dir)
			var created time.Time
			for i, l := range tc.later {
				dir = filepath.Join(dir, l)
				created = time.Now()
				mkdir(t, dir)
				if i < len(tc.later)-1 {
					waitWatching(t, m, dir)
				}
			}
			select {
			case at := <-calls:
				if d := at.Sub(created); d > time.Second {
					t.Errorf("called back %v after the cgroup's creation, want within 1 s", d)
				}
				t.Logf("called back %v after the cgroup's creation", at.Sub(created).Round(time.Microsecond))
			case <-time.After(bound):
				t.Fatalf("no callback within %v of the creation of %s", bound, target)
			}
			// The cgroup's own watch and its parent's: as for any cgroup.
			wantWatches(t, m, 2, "on the created cgroup")

			sleep := cgrouptest.StartIn(t, target, "sleep", "300")
			waitCalledUntil(t, calls, "populated", func() bool { pop, _ := cgroup.Populated(target); return pop })
			if err := sleep.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			waitCalledUntil(t, calls, "emptied", func() bool { pop, _ := cgroup.Populated(target); return !pop })
			cancel()
			wantWatches(t, m, 0, "after cancel")
		})
	}
}

// TestWatchAwaitsAllAtOnce: levels made in one go (mkdir -p), faster than
// the watcher moves down, are seen. (A level made between the watcher's
// look and its watch is caught by a second look after the watch; this
// test cannot force that moment.)
func TestWatchAwaitsAllAtOnce(t *testing.T) {
	m := newManager(t, cgroup.Options{})
	base := cgrouptest.TempRoot(t)
	for i := range 20 {
		target := filepath.Join(base, fmt.Sprintf("u%d.slice", i), "user@981.service", "app.slice", "shell-0-f1.service")
		called, cancel := watchCalls(t, m, target)
		if err := os.MkdirAll(target, 0o755); err != nil {
			t.Fatal(err)
		}
		select {
		case <-called:
		case <-time.After(bound):
			t.Fatalf("round %d: no callback after mkdir -p %s", i, target)
		}
		cancel()
	}
	wantWatches(t, m, 0, "after every cancel")
}

// TestWatchPendingCanceled: a Watch canceled while it waits leaves no
// watch and is never called, even when the cgroup appears later; one of a
// path outside the cgroup2 mount is refused as before.
func TestWatchPendingCanceled(t *testing.T) {
	m := newManager(t, cgroup.Options{})
	base := cgrouptest.TempRoot(t)
	target := filepath.Join(base, "system.slice", "slurmstepd.scope", "job_7")
	called := make(chan struct{}, 1)
	var cancels []func()
	for range 3 {
		cancel, err := m.Watch(target, func() { called <- struct{}{} })
		if err != nil {
			t.Fatal(err)
		}
		cancels = append(cancels, cancel)
	}
	// Three waiters in one directory: one watch.
	wantWatches(t, m, 1, "for three pending Watch calls")
	for _, c := range cancels {
		c()
		c()
	}
	wantWatches(t, m, 0, "after cancel")
	if err := os.MkdirAll(target, 0o755); err != nil {
		t.Fatal(err)
	}
	// A callback would come within microseconds of the creation; a Watch
	// of the same cgroup, now there, proves the creation was seen by the
	// manager's inotify instance before this check.
	seen := make(chan struct{}, 1)
	c2, err := m.Watch(target, func() { seen <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	defer c2()
	select {
	case <-called:
		t.Fatal("a canceled pending Watch was called")
	default:
	}
	if _, err := m.Watch("/nonexistent/cgroup", func() {}); err == nil {
		t.Error("Watch of a path outside the cgroup2 mount succeeded")
	}
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

// waitWatching waits until the manager's only inotify watch is on dir.
func waitWatching(t *testing.T, m *cgroup.Manager, dir string) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	want := "ino:" + strconv.FormatUint(st.Ino, 16) + " "
	testutil.Eventually(t, bound, "the pending watch on "+dir, func() bool {
		data, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(m.InotifyFD()))
		return err == nil && strings.Count(string(data), "inotify wd:") == 1 && strings.Contains(string(data), want)
	})
}

// waitCalledUntil takes callbacks until cond holds after one.
func waitCalledUntil(t *testing.T, calls chan time.Time, what string, cond func() bool) {
	t.Helper()
	timeout := time.After(bound)
	for {
		select {
		case <-calls:
			if cond() {
				return
			}
		case <-timeout:
			t.Fatalf("no callback after which the cgroup is %s", what)
		}
	}
}
