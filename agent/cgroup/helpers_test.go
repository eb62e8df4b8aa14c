package cgroup_test

import (
	"bufio"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/cgroup"
	"github.com/gracewatch/gracewatch/agent/cgroup/cgrouptest"
	"github.com/gracewatch/gracewatch/internal/testutil"
)

// bound is the generous limit of every wait on real kernel behaviour.
const bound = 5 * time.Second

// newManager returns a Manager whose Root is a fresh test cgroup, closed (and
// the cgroup destroyed) at the end of the test.
func newManager(t testing.TB, opts cgroup.Options) *cgroup.Manager {
	t.Helper()
	opts.Root = cgrouptest.TempRoot(t)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	m, err := cgroup.New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return m
}

func create(t testing.TB, m *cgroup.Manager, rel string) string {
	t.Helper()
	p, err := m.Create(rel)
	if err != nil {
		t.Fatalf("Create(%q): %v", rel, err)
	}
	return p
}

// proc is a started process reaped by a goroutine; cleanup kills it (through
// os.Process, by pidfd) and waits for the reap.
type proc struct {
	cmd  *exec.Cmd
	pid  int
	done chan struct{}
	err  error
}

func startProc(t testing.TB, m *cgroup.Manager, cmd *exec.Cmd, cg string) *proc {
	t.Helper()
	if err := m.Start(cmd, cg); err != nil {
		t.Fatalf("Start(%v, %s): %v", cmd.Args, cg, err)
	}
	p := &proc{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	return p
}

// wait waits (bounded) for the process to be reaped and returns Wait's error.
func (p *proc) wait(t testing.TB) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(bound):
		t.Fatalf("pid %d (%v) not reaped after %v", p.pid, p.cmd.Args, bound)
		return nil
	}
}

func (p *proc) exited() bool { return testutil.Closed(p.done) }

// readyPipe gives cmd an os.Pipe as stdout and returns a function that waits
// (bounded) for the next line the process writes.
func readyPipe(t testing.TB, cmd *exec.Cmd) (afterStart func(), next func() string) {
	t.Helper()
	return readyPipeWithin(t, cmd, bound)
}

// readyPipeWithin is readyPipe with next waiting up to within for a line.
func readyPipeWithin(t testing.TB, cmd *exec.Cmd, within time.Duration) (afterStart func(), next func() string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = w
	t.Cleanup(func() { r.Close(); w.Close() })
	lines := make(chan string)
	br := bufio.NewReader(r)
	return func() { w.Close() }, func() string {
		t.Helper()
		go func() {
			s, _ := br.ReadString('\n')
			lines <- strings.TrimSpace(s)
		}()
		select {
		case s := <-lines:
			return s
		case <-time.After(within):
			t.Fatalf("no line from %v after %v", cmd.Args, within)
			return ""
		}
	}
}

// waitPopulated waits, on the manager's watcher and without polling, until
// cg's cgroup.events says populated == want, and returns how long it took.
func waitPopulated(t testing.TB, m *cgroup.Manager, cg string, want bool) time.Duration {
	t.Helper()
	start := time.Now()
	ch, cancel := watchCalls(t, m, cg)
	defer cancel()
	deadline := time.After(bound)
	for {
		pop, err := cgroup.Populated(cg)
		if err != nil {
			t.Fatalf("Populated(%s): %v", cg, err)
		}
		if pop == want {
			return time.Since(start)
		}
		select {
		case <-ch:
		case <-deadline:
			pids, _ := cgroup.Procs(cg)
			t.Fatalf("cgroup %s: populated is not %v after %v (pids %v)", cg, want, bound, pids)
		}
	}
}

// watchCalls watches cg on m. The channel holds a value when the watcher
// has called back since the test last took one (the callback never
// blocks); the function cancels the watch.
func watchCalls(t testing.TB, m *cgroup.Manager, cg string) (<-chan struct{}, func()) {
	t.Helper()
	ch := make(chan struct{}, 1)
	cancel, err := m.Watch(cg, func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	return ch, cancel
}

// procCgroup returns pid's cgroup v2 path relative to the mount.
func procCgroup(t testing.TB, pid int) string {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := cgroup.OwnCgroup(f)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// rel turns an absolute cgroup path into the form of /proc/<pid>/cgroup.
func rel(m *cgroup.Manager, cg string) string {
	return strings.TrimPrefix(cg, m.Mount())
}

// procStatus returns the fields of /proc/<pid>/status.
func procStatus(t testing.TB, pid int) map[string]string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]string)
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

func wantNotOwned(t testing.TB, op string, err error, path string) {
	t.Helper()
	if !errors.Is(err, cgroup.ErrNotOwned) {
		t.Errorf("%s(%s) = %v, want ErrNotOwned", op, path, err)
		return
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("%s(%s): error %q does not name the path", op, path, err)
	}
}

func timeAfterBound() <-chan time.Time { return time.After(bound) }
