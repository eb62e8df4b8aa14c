package cgroup_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/gracewatch/gracewatch/agent/cgroup"
	"github.com/gracewatch/gracewatch/agent/cgroup/cgrouptest"
	"github.com/gracewatch/gracewatch/internal/testutil"
)

func realMount(t *testing.T) string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mount, err := cgroup.FindMount(f)
	testutil.Require(t, err == nil, "no cgroup v2 mount")
	return mount
}

func TestNew(t *testing.T) {
	root := cgrouptest.TempRoot(t)
	sub := filepath.Join(root, "made/by/new")
	m, err := cgroup.New(cgroup.Options{Root: sub + "/"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Mount() != realMount(t) || m.Root() != sub {
		t.Errorf("Mount, Root = %s, %s; want %s, %s", m.Mount(), m.Root(), realMount(t), sub)
	}
	if _, err := os.Stat(filepath.Join(sub, "cgroup.events")); err != nil {
		t.Errorf("root not created: %v", err)
	}
	f := m.Features()
	t.Logf("features: %+v", f)
	if _, err := os.Stat(filepath.Join(sub, "cgroup.kill")); f.Kill != (err == nil) {
		t.Errorf("Features.Kill = %v, cgroup.kill stat: %v", f.Kill, err)
	}
	if _, err := os.Stat(filepath.Join(sub, "cgroup.freeze")); f.Freeze != (err == nil) {
		t.Errorf("Features.Freeze = %v, cgroup.freeze stat: %v", f.Freeze, err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := m.Watch(sub, func() {}); !errors.Is(err, cgroup.ErrClosed) {
		t.Errorf("Watch after Close = %v, want ErrClosed", err)
	}
}

func TestNewErrors(t *testing.T) {
	testutil.RequireRoot(t)
	mount := realMount(t)
	fakeProc := func(cgroupFile, mountinfo string) string {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "self"), 0o755); err != nil {
			t.Fatal(err)
		}
		for name, s := range map[string]string{"cgroup": cgroupFile, "mountinfo": mountinfo} {
			if err := os.WriteFile(filepath.Join(dir, "self", name), []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	v1only, err := os.ReadFile("testdata/mountinfo-v1only")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		opts    cgroup.Options
		want    string
		wantErr error
	}{
		{name: "mount is not cgroup2", opts: cgroup.Options{Mount: t.TempDir(), Root: "/x"}, wantErr: cgroup.ErrNoCgroup2},
		{name: "no cgroup2 in mountinfo", opts: cgroup.Options{ProcRoot: fakeProc("0::/\n", string(v1only)), Root: "/x"}, wantErr: cgroup.ErrNoCgroup2},
		{name: "root outside mount", opts: cgroup.Options{Mount: mount, Root: "/tmp/gracewatch"}, want: "not below"},
		{name: "root is mount", opts: cgroup.Options{Mount: mount, Root: mount}, want: "not below"},
		{name: "relative root", opts: cgroup.Options{Mount: mount, Root: "gracewatch"}, want: "not an absolute path"},
		{name: "delegated from the root cgroup", opts: cgroup.Options{Mount: mount, ProcRoot: fakeProc("0::/\n", "")}, want: "root cgroup"},
		{name: "v1-only cgroup file", opts: cgroup.Options{Mount: mount, ProcRoot: fakeProc("1:name=systemd:/\n", "")}, wantErr: cgroup.ErrNoCgroup2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := cgroup.New(tt.opts)
			if err == nil {
				m.Close()
				t.Fatal("New succeeded, want an error")
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("New = %v, want %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestNewDelegated runs the test binary inside a test cgroup as an agent
// under systemd Delegate=yes would be (Options.Root ""): it must take its own
// cgroup as Root and move itself into Root/agent.
func TestNewDelegated(t *testing.T) {
	m := newManager(t, cgroup.Options{})
	svc := create(t, m, "svc.service")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	// No 1 s race-detector sleep at the child's exit.
	cmd.Env = append(os.Environ(), delegatedEnv+"=1", "GORACE=atexit_sleep_ms=0")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := startProc(t, m, cmd, svc).wait(t); err != nil {
		t.Fatalf("delegated agent: %v\n%s", err, errOut.String())
	}
	var r delegatedReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("report %q: %v", out.String(), err)
	}
	if r.Err != "" {
		t.Fatalf("New in the delegated agent: %s", r.Err)
	}
	if r.Before != rel(m, svc) || r.Root != svc || r.After != rel(m, svc)+"/agent" {
		t.Errorf("delegated agent: own cgroup %s, Root %s, then own cgroup %s; want %s, %s, %s/agent",
			r.Before, r.Root, r.After, rel(m, svc), svc, rel(m, svc))
	}
	for call, msg := range map[string]string{"Kill": r.KillSelf, "Signal": r.SignalSelf, "Remove": r.RemoveSelf} {
		if !strings.Contains(msg, "holds the agent") {
			t.Errorf("%s on the agent's own cgroup: %q, want a refusal", call, msg)
		}
	}
}

func TestCreateOwnsResolve(t *testing.T) {
	m := newManager(t, cgroup.Options{})
	root := m.Root()
	if p, err := m.Create("job-1/step"); err != nil || p != root+"/job-1/step" {
		t.Errorf("Create = %q, %v", p, err)
	}
	for _, bad := range []string{"", ".", "..", "../x", "a/../../x", "/abs", "a//b", "a/", "./a"} {
		if p, err := m.Create(bad); err == nil {
			t.Errorf("Create(%q) = %q, want an error", bad, p)
		}
	}
	owns := map[string]bool{
		root: true, root + "/job-1": true, root + "/job-1/../job-2": true, root + "/": true,
		root + "x": false, root + "/..": false, filepath.Dir(root): false, "job-1": false, "/": false,
	}
	for p, want := range owns {
		if got := m.Owns(p); got != want {
			t.Errorf("Owns(%q) = %v, want %v", p, got, want)
		}
	}

	foreign := cgrouptest.TempRoot(t)
	for _, in := range []string{foreign, strings.TrimPrefix(foreign, m.Mount()+"/"), foreign + "/"} {
		if got, err := m.Resolve(in); err != nil || got != foreign {
			t.Errorf("Resolve(%q) = %q, %v; want %q", in, got, err, foreign)
		}
	}
	for _, bad := range []string{foreign + "/missing", "missing", "/etc", m.Mount(), "../../etc"} {
		got, err := m.Resolve(bad)
		if err == nil {
			t.Errorf("Resolve(%q) = %q, want an error", bad, got)
		} else if !strings.Contains(err.Error(), bad) {
			t.Errorf("Resolve(%q): error %q does not name the path", bad, err)
		}
	}
}

func TestStart(t *testing.T) {
	for _, mode := range []string{"clone_into_cgroup", "shim"} {
		t.Run(mode, func(t *testing.T) {
			m := newManager(t, cgroup.Options{ForceShim: mode == "shim"})
			if mode == "clone_into_cgroup" {
				testutil.Require(t, m.Features().CgroupFD, "clone3(CLONE_INTO_CGROUP) unavailable")
			}
			cg := create(t, m, "job")

			t.Run("in the cgroup from the start", func(t *testing.T) {
				cmd := exec.Command("sleep", "1000")
				cmd.Args[0] = "gw-argv0"
				attr := &syscall.SysProcAttr{Setsid: true}
				cmd.SysProcAttr = attr
				path := cmd.Path
				p := startProc(t, m, cmd, cg)
				// Right after Start, before anything else.
				if got := procCgroup(t, p.pid); got != rel(m, cg) {
					t.Errorf("pid %d is in %s right after Start, want %s", p.pid, got, rel(m, cg))
				}
				comm, _ := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/comm")
				if strings.TrimSpace(string(comm)) != "sleep" {
					t.Errorf("pid %d runs %q, want sleep (the program itself, same pid)", p.pid, comm)
				}
				cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/cmdline")
				if want := "gw-argv0\x001000\x00"; string(cmdline) != want {
					t.Errorf("cmdline %q, want %q", cmdline, want)
				}
				stat, _ := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/stat")
				f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
				if f[3] != strconv.Itoa(p.pid) {
					t.Errorf("session %s, want %d (Setsid kept)", f[3], p.pid)
				}
				if cmd.SysProcAttr != attr || attr.UseCgroupFD || cmd.Path != path || cmd.Args[0] != "gw-argv0" {
					t.Errorf("cmd not restored: SysProcAttr %+v, Path %s, Args %v", cmd.SysProcAttr, cmd.Path, cmd.Args)
				}
				procs, _ := cgroup.Procs(cg)
				if len(procs) != 1 || procs[0] != p.pid {
					t.Errorf("cgroup.procs %v, want [%d]", procs, p.pid)
				}
			})

			t.Run("credential and extra files kept", func(t *testing.T) {
				r, w, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				cmd := exec.Command("sh", "-c", `echo "$(id -u) $(id -g) $(id -G)" >&3; cat /proc/self/cgroup | grep ^0::`)
				cmd.ExtraFiles = []*os.File{w}
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{65533}}}
				var out bytes.Buffer
				cmd.Stdout = &out
				p := startProc(t, m, cmd, cg)
				w.Close()
				if err := p.wait(t); err != nil {
					t.Fatalf("sh: %v", err)
				}
				ids, _ := readAll(r)
				// id -G lists the primary group first.
				if want := "65534 65534 65534 65533\n"; ids != want {
					t.Errorf("ids via fd 3: %q, want %q", ids, want)
				}
				if want := "0::" + rel(m, cg) + "\n"; out.String() != want {
					t.Errorf("cgroup seen by the program: %q, want %q", out.String(), want)
				}
			})

			t.Run("exec failure", func(t *testing.T) {
				cmd := exec.Command("/nonexistent/gracewatch-epilogue")
				err := m.Start(cmd, cg)
				if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "/nonexistent/gracewatch-epilogue") {
					t.Errorf("Start = %v, want ENOENT naming the program", err)
				}
				if pop, _ := cgroup.Populated(cg); pop {
					procs, _ := cgroup.Procs(cg)
					t.Errorf("cgroup populated after a failed start: %v", procs)
				}
			})
		})
	}
}

func readAll(f *os.File) (string, error) {
	var b bytes.Buffer
	_, err := b.ReadFrom(f)
	return b.String(), err
}

// fdinfoWatches counts the inotify watches of the manager's instance.
func fdinfoWatches(t *testing.T, m *cgroup.Manager) int {
	t.Helper()
	data, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(m.InotifyFD()))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(data), "inotify wd:")
}

// wantWatches reports an error unless the manager's instance holds want
// inotify watches; when says at what point of the test ("after cancel").
func wantWatches(t *testing.T, m *cgroup.Manager, want int, when string) {
	t.Helper()
	if got := fdinfoWatches(t, m); got != want {
		t.Errorf("%d inotify watches %s, want %d", got, when, want)
	}
}

func TestWatch(t *testing.T) {
	m := newManager(t, cgroup.Options{})
	cg := create(t, m, "watched")
	var n1, n2 atomic.Int32
	ch1, ch2 := make(chan struct{}, 1), make(chan struct{}, 1)
	notify := func(n *atomic.Int32, ch chan struct{}) func() {
		return func() {
			n.Add(1)
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	cancel1, err := m.Watch(cg, notify(&n1, ch1))
	if err != nil {
		t.Fatal(err)
	}
	cancel2, err := m.Watch(cg, notify(&n2, ch2))
	if err != nil {
		t.Fatal(err)
	}
	// One watch on cgroup.events (same inode, same wd) and one on the parent
	// directory for removals.
	wantWatches(t, m, 2, "for two Watch calls on one cgroup")

	// A shell that exits when its stdin closes.
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdinW.Close()
	cmd := exec.Command("sh", "-c", "read x")
	cmd.Stdin = stdinR
	p := startProc(t, m, cmd, cg)
	stdinR.Close()
	for i, ch := range []chan struct{}{ch1, ch2} {
		select {
		case <-ch:
		case <-p.done:
			t.Fatal("sh exited early")
		case <-timeAfterBound():
			t.Fatalf("watcher %d: no callback for populated 1", i+1)
		}
	}
	if pop, err := cgroup.Populated(cg); !pop || err != nil {
		t.Fatalf("Populated = %v, %v after the start", pop, err)
	}

	cancel1()
	cancel1() // idempotent
	before := n1.Load()
	stdinW.Close()
	var ee *exec.ExitError
	if err := p.wait(t); !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("sh: %v, want exit status 1 (read at EOF)", err)
	}
	// The callback must come for the change to populated 0 (the re-read
	// after each callback, not the callback, tells the state).
	for {
		select {
		case <-ch2:
		case <-timeAfterBound():
			t.Fatal("watcher 2: no callback for populated 0")
		}
		if pop, _ := cgroup.Populated(cg); !pop {
			break
		}
	}
	cancel2()
	wantWatches(t, m, 0, "after both cancels")
	// Close waits for the watcher goroutine: no callback can still be running.
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if got := n1.Load(); got != before {
		t.Errorf("canceled callback ran %d more times", got-before)
	}
	if n2.Load() < 2 {
		t.Errorf("callback 2 ran %d times, want at least 2 (populated 1, then 0)", n2.Load())
	}

	if _, err := m.Watch(filepath.Join(m.Root(), "missing"), func() {}); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Watch(missing) = %v, want an error naming the path", err)
	}
}

func TestWatchErrors(t *testing.T) {
	m := newManager(t, cgroup.Options{})
	// A cgroup that does not exist yet is awaited (watch_pending_test.go),
	// but not below a file, outside the cgroup2 mount, or at its root.
	for _, p := range []string{filepath.Join(m.Root(), "cgroup.procs", "x"), "/etc", "relative", m.Mount(), "/nonexistent/cgroup"} {
		if _, err := m.Watch(p, func() {}); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("Watch(%q) = %v, want an error naming the path", p, err)
		}
	}
}

// TestWatchRemoved: removing a watched cgroup ends the watch (IN_IGNORED)
// with one last callback.
func TestWatchRemoved(t *testing.T) {
	m := newManager(t, cgroup.Options{})
	cg := create(t, m, "short-lived")
	ch := make(chan struct{}, 10)
	cancel, err := m.Watch(cg, func() { ch <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(cg); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-timeAfterBound():
		t.Fatal("no callback after the cgroup was removed")
	}
	if _, err := os.Stat(cg); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("cgroup still there: %v", err)
	}
	wantWatches(t, m, 0, "after the removal")
	cancel() // a no-op now
}
