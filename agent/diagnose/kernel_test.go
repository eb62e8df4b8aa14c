package diagnose

// Tests against the real kernel: real processes in a real cgroup v2, and a
// truly unkillable reader of a FUSE file system whose reads never answer.
// They need root; outside CI they skip without it, in CI they fail.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gracewatch/gracewatch/agent/cgroup"
	"github.com/gracewatch/gracewatch/agent/procfs"
	"github.com/gracewatch/gracewatch/agent/procfs/procfstest"
	"github.com/gracewatch/gracewatch/internal/hostinfo"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/internal/testutil/hangfs"
)

// helperEnv selects a helper mode of the re-executed test binary.
const helperEnv = "GRACEWATCH_DIAGNOSE_HELPER"

func init() {
	if os.Getenv(helperEnv) == "leader-exit" {
		// Keep the main goroutine on the main thread, which the helper
		// then ends alone.
		runtime.LockOSThread()
	}
}

// runHelperIfRequested runs a helper mode and never returns, when asked to.
//
// "leader-exit" ends the main thread with exit(2), not exit_group(2): the
// process lives on in the Go runtime's other threads behind a zombie thread
// group leader, the case cgroup.kill misses on 6.18.
func runHelperIfRequested() {
	switch os.Getenv(helperEnv) {
	case "":
		return
	case "leader-exit":
		// The main goroutine is locked to the main thread, so this one
		// runs on another: once it has started, a thread outlives the
		// main thread's exit.
		running := make(chan struct{})
		go func() {
			close(running)
			for {
				time.Sleep(time.Hour) // not a wait: the helper lives until the test kills it
			}
		}()
		<-running
		unix.RawSyscall(unix.SYS_EXIT, 0, 0, 0)
	}
	os.Exit(2)
}

// cgroupV2Mount returns the cgroup v2 mount from /proc/self/mountinfo.
func cgroupV2Mount(t *testing.T) string {
	t.Helper()
	mp := mountpointOf(t, "cgroup2")
	testutil.Require(t, mp != "", "needs a cgroup v2 mount")
	return mp
}

// mountpointOf returns where the first file system of type fstype in
// /proc/self/mountinfo is mounted, or "".
func mountpointOf(t *testing.T, fstype string) string {
	t.Helper()
	for _, m := range procfstest.SelfMounts(t) {
		if m.FSType == fstype {
			return m.Mountpoint
		}
	}
	return ""
}

// newCgroup makes <v2 mount>/gwtest-<random> and removes it at cleanup,
// after the processes the test started there are reaped.
func newCgroup(t *testing.T) string {
	t.Helper()
	testutil.RequireRoot(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	dir := filepath.Join(cgroupV2Mount(t), "gwtest-"+hex.EncodeToString(b))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("make test cgroup: %v", err)
	}
	t.Cleanup(func() {
		var err error
		if !testutil.Poll(30*time.Second, func() bool {
			err = unix.Rmdir(dir)
			return err == nil || err == unix.ENOENT
		}) {
			t.Errorf("remove test cgroup %s: %v", dir, err)
		}
	})
	return dir
}

// proc is a process a test started; it is killed by its pid and reaped at
// cleanup.
type proc struct {
	cmd      *exec.Cmd
	reapOnce sync.Once
	reaped   chan struct{}
}

// start runs argv, directly inside the cgroup cg when cg is not empty
// (CLONE_INTO_CGROUP). It is reaped only once the test calls reap (or at
// cleanup), so it may be left a zombie.
func start(t *testing.T, cg string, env []string, argv ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(argv[0], argv[1:]...), reaped: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	if cg != "" {
		fd, err := unix.Open(cg, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		p.cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %q: %v", argv, err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		if !p.waitExit(10 * time.Second) {
			t.Errorf("pid %d not reaped 10s after SIGKILL", p.pid())
		}
	})
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// waitExit reaps the process, waiting at most d; it reports whether it did.
func (p *proc) waitExit(d time.Duration) bool {
	p.reapOnce.Do(func() {
		go func() {
			_ = p.cmd.Wait()
			close(p.reaped)
		}()
	})
	select {
	case <-p.reaped:
		return true
	case <-time.After(d):
		return false
	}
}

func taskFile(pid, tid int, name string) string {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/%s", pid, tid, name))
	return string(data)
}

func taskState(pid, tid int) string {
	st, err := procfs.ParseStat([]byte(taskFile(pid, tid, "stat")))
	if err != nil {
		return ""
	}
	return st.State
}

func realSnapshotter(t *testing.T) *Snapshotter {
	t.Helper()
	host := hostinfo.NewReader(hostinfo.Options{StateDir: t.TempDir()})
	return NewSnapshotter(Options{
		Proc:           procfs.New(procfs.Options{Timeout: 2 * time.Second}),
		SampleInterval: 200 * time.Millisecond,
		Node:           "test",
		// As the agent wires it (agent.New).
		Host: func(ctx context.Context) HostFacts { return HostFacts(host.Read(ctx)) },
	})
}

// snapshotEscalated snapshots job's cgroup cg (owned) after escalation
// with a one-second grace, as the agent does at E + G: the real
// snapshotter, with pids (processes outside the cgroup, such as zombies)
// added; kill, when not nil, is the timeline's SIGKILL.
func snapshotEscalated(t *testing.T, job, cg string, kill *time.Time, pids ...int) *Report {
	t.Helper()
	return realSnapshotter(t).Snapshot(context.Background(), Request{
		Job: job, Grace: time.Second, Stage: StageAfterEscalation, Timeline: Timeline{Kill: kill},
		Cgroups: []CgroupRef{{Path: cg, Owned: true}}, PIDs: pids,
	})
}

// onlyProcess is the one process of r, which must be pid's.
func onlyProcess(t *testing.T, r *Report, pid int) Process {
	t.Helper()
	if len(r.Processes) != 1 || r.Processes[0].PID != pid {
		t.Fatalf("processes %+v, want only pid %d (is it in cgroup.procs?)", r.Processes, pid)
	}
	return r.Processes[0]
}

// The FUSE abort that a report suggests works as printed on this machine,
// whether fusectl is mounted or not: run by sh, it releases the unkillable
// reader. When fusectl was not mounted, the suggestion mounts it first; the
// test unmounts it again.
func TestRealFuseAbortAsPrinted(t *testing.T) {
	testutil.RequireRoot(t)
	srv := hangfs.Start(t)
	cg := newCgroup(t)
	before := mountpointOf(t, "fusectl")
	if before == "" {
		t.Cleanup(func() {
			if at := mountpointOf(t, "fusectl"); at != "" {
				if err := unix.Unmount(at, 0); err != nil {
					t.Errorf("unmount the fusectl this test mounted: %v", err)
				}
			}
		})
	}
	cat := start(t, cg, nil, "cat", srv.Path(hangfs.HangFile))
	pid := cat.pid()
	if err := srv.WaitHungReads(1); err != nil {
		t.Fatal(err)
	}
	if err := cat.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "cat in D after SIGKILL", func() bool { return taskState(pid, pid) == "D" })
	kill := time.Now()
	r := snapshotEscalated(t, "44", cg, &kill)
	wantCtl := before
	if wantCtl == "" {
		wantCtl = FuseCtlNotMounted
	}
	if r.NodeContext.FuseCtl != wantCtl {
		t.Errorf("fusectl %q, want %q", r.NodeContext.FuseCtl, wantCtl)
	}
	h := r.NodeContext.Host
	if h == nil || h.MemTotalBytes == 0 || h.UptimeSeconds == 0 || h.StateDirSizeBytes == 0 || r.NodeContext.LoadAvg == "" {
		t.Errorf("host facts %+v, loadavg %q", h, r.NodeContext.LoadAvg)
	}
	const prefix = "abort the FUSE connection: "
	var cmd string
	for _, s := range r.Suggestions {
		if rest, ok := strings.CutPrefix(s, prefix); ok {
			cmd, _, _ = strings.Cut(rest, " (")
		}
	}
	if cmd == "" {
		t.Fatalf("no FUSE abort in %q", r.Suggestions)
	}
	if mounts := strings.HasPrefix(cmd, "mount -t fusectl "); mounts != (before == "") {
		t.Errorf("suggestion %q: mounts fusectl %v, but fusectl was mounted at %q", cmd, mounts, before)
	}
	t.Logf("running as printed: %s", cmd)
	if out, err := exec.Command("sh", "-c", cmd).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", cmd, err, out)
	}
	if !cat.waitExit(10 * time.Second) {
		t.Fatalf("cat pid %d still there 10s after the abort", pid)
	}
}

func TestRealUnkillable(t *testing.T) {
	testutil.RequireRoot(t)
	srv := hangfs.Start(t)
	cg := newCgroup(t)
	cat := start(t, cg, nil, "cat", srv.Path(hangfs.HangFile))
	pid := cat.pid()
	if err := srv.WaitHungReads(1); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "cat blocked in request_wait_answer", func() bool {
		return strings.Contains(taskFile(pid, pid, "stack"), "request_wait_answer")
	})
	if err := cat.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "cat in D after SIGKILL", func() bool { return taskState(pid, pid) == "D" })

	s := realSnapshotter(t)
	kill := time.Now()
	req := Request{
		Job: "42", Grace: 5 * time.Second, Stage: StageAfterEscalation,
		Timeline: Timeline{Kill: &kill},
		Cgroups:  []CgroupRef{{Path: cg, Owned: true}},
		DSince:   map[int]time.Time{pid: kill},
	}
	r := s.Snapshot(context.Background(), req)
	if len(r.Processes) != 1 {
		t.Fatalf("processes %+v, want the cat alone", r.Processes)
	}
	p := r.Processes[0]
	if p.PID != pid || p.Comm != "cat" || p.Class != Unkillable || p.State != "D" {
		t.Errorf("process %d %s class %s state %s, want %d cat unkillable D", p.PID, p.Comm, p.Class, p.State, pid)
	}
	if len(p.Threads) != 1 {
		t.Fatalf("threads %+v", p.Threads)
	}
	th := p.Threads[0]
	if th.State != "D" || !th.KillPending || !slices.Contains(th.SigPnd.Names, "SIGKILL") || th.Scheduled {
		t.Errorf("thread state %s kill pending %v sigpnd %v scheduled %v, want D, SIGKILL pending, not scheduled",
			th.State, th.KillPending, th.SigPnd, th.Scheduled)
	}
	if th.Wchan != "request_wait_answer" && !slices.Contains(th.Stack, "request_wait_answer") {
		t.Errorf("wchan %q stack %q name no request_wait_answer", th.Wchan, th.Stack)
	}
	hang := fileOf(p, "3")
	major, minor := srv.Device()
	if hang.Target != srv.Path(hangfs.HangFile) || !strings.HasPrefix(hang.FSType, "fuse") ||
		hang.Device != fmt.Sprintf("%d:%d", major, minor) {
		t.Errorf("fd 3 = %+v, want %s on fuse, device %d:%d", hang, srv.Path(hangfs.HangFile), major, minor)
	}
	if p.SecondsInD <= 0 {
		t.Errorf("seconds in D = %v", p.SecondsInD)
	}
	if len(p.Errors) > 0 || len(th.Errors) > 0 || len(r.Errors) > 0 {
		t.Errorf("read errors: %q %q %q", r.Errors, p.Errors, th.Errors)
	}
	_, err := os.Stat("/proc/sys/kernel/hung_task_detect_count")
	if (err == nil) != (r.NodeContext.HungTaskDelta >= 0) || r.NodeContext.LoadAvg == "" {
		t.Errorf("node context %+v", r.NodeContext)
	}
	for _, want := range []string{"unkillable", "pid " + strconv.Itoa(pid), "request_wait_answer", srv.Mountpoint()} {
		if !strings.Contains(r.Summary, want) {
			t.Errorf("summary %q lacks %q", r.Summary, want)
		}
	}
	abort := fmt.Sprintf("/sys/fs/fuse/connections/%d/abort", minor)
	if !slices.ContainsFunc(r.Suggestions, func(s string) bool { return strings.Contains(s, abort) }) {
		t.Errorf("suggestions %q do not name %s", r.Suggestions, abort)
	}
	if r.Outcome != OutcomeHung || r.Cgroups[0].Events["populated"] != "1" {
		t.Errorf("outcome %q events %v", r.Outcome, r.Cgroups[0].Events)
	}
	t.Logf("summary: %s", r.Summary)

	// Ending the server releases the reader, and the cgroup empties.
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if !cat.waitExit(10 * time.Second) {
		t.Fatalf("cat pid %d still there 10s after the server stopped", pid)
	}
	testutil.Eventually(t, 10*time.Second, "populated 0", func() bool {
		ev, err := cgroup.ReadEvents(cg)
		return err == nil && !ev.Populated
	})
	r = s.Snapshot(context.Background(), req)
	if len(r.Processes) != 0 || r.Summary != "job 42 teardown exceeded grace 5s: all processes killed" {
		t.Errorf("after release: %d processes, summary %q", len(r.Processes), r.Summary)
	}
}

func TestRealMissedSleep(t *testing.T) {
	cg := newCgroup(t)
	sl := start(t, cg, nil, "sleep", "1000")
	pid := sl.pid()
	testutil.Eventually(t, 10*time.Second, "sleep in S", func() bool { return taskState(pid, pid) == "S" })

	r := snapshotEscalated(t, "43", cg, nil)
	p := onlyProcess(t, r, pid)
	if p.Class != Missed || p.State != "S" || p.Threads[0].KillPending {
		t.Errorf("sleep: class %s state %s kill pending %v, want missed S false", p.Class, p.State, p.Threads[0].KillPending)
	}
	if !slices.Equal(p.Cmdline, []string{"sleep", "1000"}) || !strings.HasSuffix(p.Exe, "sleep") {
		t.Errorf("cmdline %q exe %q", p.Cmdline, p.Exe)
	}
	if age := time.Since(p.StartTime); age < -2*time.Second || age > time.Minute {
		t.Errorf("start time %v is %v ago", p.StartTime, age)
	}
	if want := "kill(2) pid " + strconv.Itoa(pid); !slices.ContainsFunc(r.Suggestions, func(s string) bool { return strings.HasPrefix(s, want) }) {
		t.Errorf("suggestions %q lack %q", r.Suggestions, want)
	}
}

func TestRealZombie(t *testing.T) {
	cg := newCgroup(t)
	z := start(t, cg, nil, "true")
	pid := z.pid()
	testutil.Eventually(t, 10*time.Second, "an unreaped zombie", func() bool { return taskState(pid, pid) == "Z" })
	// A zombie has left its cgroup: only req.PIDs brings it into the report.
	if pids, err := cgroup.Procs(cg); err != nil || len(pids) != 0 {
		t.Errorf("cgroup.procs with a zombie = %v, %v; want empty", pids, err)
	}
	r := snapshotEscalated(t, "44", cg, nil, pid)
	if len(r.Processes) != 1 || r.Processes[0].Class != Zombie || r.Processes[0].State != "Z" {
		t.Fatalf("processes %+v, want one zombie", r.Processes)
	}
	if len(r.Processes[0].Errors) > 0 {
		t.Errorf("errors reading a zombie: %q", r.Processes[0].Errors)
	}
	if !z.waitExit(10 * time.Second) {
		t.Fatal("zombie not reaped")
	}
	r = realSnapshotter(t).Snapshot(context.Background(), Request{Job: "44", PIDs: []int{pid}})
	if len(r.Processes) != 0 {
		t.Errorf("a reaped process is still reported: %+v", r.Processes)
	}
}

// TestRealZombieLeader snapshots a process whose main thread has exited
// while its other threads live: it is listed in cgroup.procs, its main
// thread is Z, and it is missed, not a harmless zombie.
func TestRealZombieLeader(t *testing.T) {
	cg := newCgroup(t)
	h := start(t, cg, []string{helperEnv + "=leader-exit"}, os.Args[0], "-test.run=^$")
	pid := h.pid()
	testutil.Eventually(t, 10*time.Second, "a zombie leader with live threads", func() bool {
		if taskState(pid, pid) != "Z" {
			return false
		}
		names, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		return len(names) > 1
	})
	p := onlyProcess(t, snapshotEscalated(t, "45", cg, nil), pid)
	if p.Class != Missed || p.State == "Z" {
		t.Errorf("class %s state %s, want missed, summarised by a live thread", p.Class, p.State)
	}
	main := p.Threads[0]
	if main.TID != pid || main.State != "Z" || main.Class != Missed {
		t.Errorf("main thread %d state %s class %s, want Z missed", main.TID, main.State, main.Class)
	}
}
