package hangfs_test

import (
	"errors"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gracewatch/gracewatch/agent/procfs"
	"github.com/gracewatch/gracewatch/agent/procfs/procfstest"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/internal/testutil/hangfs"
)

func TestMain(m *testing.M) {
	hangfs.RunIfRequested()
	goleak.VerifyTestMain(m)
}

func TestOKFileReads(t *testing.T) {
	s := hangfs.Start(t)
	data, err := os.ReadFile(s.Path(hangfs.OKFile))
	if err != nil || string(data) != "ok\n" {
		t.Fatalf("read ok = %q, %v; want \"ok\\n\"", data, err)
	}
	m := mountAt(t, s.Mountpoint())
	if m.FSType != "fuse."+hangfs.Name || m.Source != hangfs.FsName {
		t.Errorf("mount = %s %s, want fuse.%s %s", m.FSType, m.Source, hangfs.Name, hangfs.FsName)
	}
	if _, minor := s.Device(); minor != m.Minor {
		t.Errorf("Device minor = %d, mountinfo says %d", minor, m.Minor)
	}
}

// killedHungReader starts a hangfs server and a reader of its hang file,
// waits until the read hangs, kills the reader and returns once SIGKILL
// has been dealt with and it could not end it (with its status then): the
// reader is in D again after a voluntary context switch counted since the
// kill (SIGKILL woke it from the interruptible wait, and the kernel put it
// back to sleep, uninterruptibly, for the request the server has read),
// with SIGKILL still pending. A D read before the wakeup would not say
// that; this does, whenever the kernel gets to it.
func killedHungReader(t *testing.T) (*hangfs.Server, *exec.Cmd, procfs.Status) {
	t.Helper()
	s := hangfs.Start(t)
	cat := startReader(t, s.Path(hangfs.HangFile))
	if err := s.WaitHungReads(1); err != nil {
		t.Fatal(err)
	}
	pid := cat.Process.Pid
	waitBlocked(t, pid)
	before := readStatus(t, pid).VoluntaryCtxtSwitches
	if err := cat.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	var st procfs.Status
	if !testutil.Poll(30*time.Second, func() bool {
		st = readStatus(t, pid)
		return st.State == "D" && st.VoluntaryCtxtSwitches > before && (st.SigPnd|st.ShdPnd)&procfs.SigKillMask != 0
	}) {
		t.Fatalf("pid %d after SIGKILL: state %s, %d voluntary context switches (%d before the kill), SigPnd %x ShdPnd %x; want D again, SIGKILL pending",
			pid, st.State, st.VoluntaryCtxtSwitches, before, st.SigPnd, st.ShdPnd)
	}
	return s, cat, st
}

// TestKilledReaderIsUnkillableUntilStop proves the kernel behaviour the
// diagnostics are tested against: a reader of "hang" that gets SIGKILL stays
// in D with SIGKILL pending and request_wait_answer in its stack, and ending
// the server releases it.
func TestKilledReaderIsUnkillableUntilStop(t *testing.T) {
	s, cat, st := killedHungReader(t)
	if st.SigPnd&procfs.SigKillMask == 0 && st.ShdPnd&procfs.SigKillMask == 0 {
		t.Errorf("SIGKILL not pending: SigPnd %x ShdPnd %x", st.SigPnd, st.ShdPnd)
	}
	if stack := readStack(t, cat.Process.Pid); !slices.Contains(stack, "request_wait_answer") {
		t.Errorf("stack %v lacks request_wait_answer", stack)
	}
	// Woken by SIGKILL and asleep again with it pending (killedHungReader):
	// SIGKILL cannot end it. Still so now.
	if st := readStatus(t, cat.Process.Pid); st.State != "D" {
		t.Errorf("state %s after SIGKILL put it back to sleep, want D", st.State)
	}

	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	waitExit(t, cat)
	if _, ok := findMount(t, s.Mountpoint()); ok {
		t.Errorf("mount %s still there after Stop", s.Mountpoint())
	}
	if _, err := os.Lstat(s.Mountpoint()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("mountpoint after Stop: %v, want not exist", err)
	}
	if err := s.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// TestStopEndsASelfBlockedServer: a server with a thread waiting on its own
// mount (as go-fuse's probe does while it mounts) is in D after SIGKILL for
// ever; Stop ends it anyway, promptly, because it aborts the connection
// before it kills, and leaves no fusectl mount behind.
func TestStopEndsASelfBlockedServer(t *testing.T) {
	fusectlBefore := fusectlMounted(t)
	s := hangfs.StartSelfReading(t)
	if err := s.WaitHungReads(1); err != nil {
		t.Fatal(err)
	}
	if tid := blockedTask(t, s.PID()); tid == 0 {
		t.Fatalf("no thread of server pid %d in request_wait_answer", s.PID())
	}
	start := time.Now()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Stop took %v", d)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(s.PID())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("server pid %d still there after Stop: %v", s.PID(), err)
	}
	if _, ok := findMount(t, s.Mountpoint()); ok {
		t.Errorf("mount %s still there after Stop", s.Mountpoint())
	}
	if got := fusectlMounted(t); got != fusectlBefore {
		t.Errorf("fusectl mounted at %s: %v after Stop, %v before", hangfs.FusectlDir, got, fusectlBefore)
	}
}

// TestAbortThroughPrivateFusectl: where fusectl is not mounted, the abort
// mounts it in a private mount namespace of a child process, which nobody
// else sees and which ends with the child.
func TestAbortThroughPrivateFusectl(t *testing.T) {
	fusectlBefore := fusectlMounted(t)
	s := hangfs.Start(t)
	cat := startReader(t, s.Path(hangfs.HangFile))
	if err := s.WaitHungReads(1); err != nil {
		t.Fatal(err)
	}
	if err := hangfs.AbortThroughPrivateFusectl(s); err != nil {
		t.Fatal(err)
	}
	waitExit(t, cat)
	if got := fusectlMounted(t); got != fusectlBefore {
		t.Errorf("fusectl mounted at %s: %v after the abort, %v before", hangfs.FusectlDir, got, fusectlBefore)
	}
	// A connection that has ended is no error.
	if err := hangfs.AbortThroughPrivateFusectl(s); err != nil {
		t.Errorf("second abort: %v", err)
	}
}

func TestAbortReleasesReader(t *testing.T) {
	s, cat, _ := killedHungReader(t)
	if err := s.Abort(); err != nil {
		t.Fatal(err)
	}
	waitExit(t, cat)
}

// startReader starts cat on path, killed by pid and reaped at cleanup.
func startReader(t *testing.T, path string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("cat", path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("cat pid %d not reaped", cmd.Process.Pid)
		}
	})
	waiting[cmd] = done
	return cmd
}

// waiting maps a started reader to the channel closed when it is reaped.
// Tests in this package do not run in parallel.
var waiting = map[*exec.Cmd]chan struct{}{}

func waitExit(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	select {
	case <-waiting[cmd]:
	case <-time.After(10 * time.Second):
		t.Fatalf("pid %d did not exit within 10s", cmd.Process.Pid)
	}
}

func waitBlocked(t *testing.T, pid int) {
	t.Helper()
	var stack []string
	if !testutil.Poll(30*time.Second, func() bool {
		stack = readStack(t, pid)
		return slices.Contains(stack, "request_wait_answer")
	}) {
		t.Fatalf("pid %d not in request_wait_answer after 30s; stack %v", pid, stack)
	}
}

func readStatus(t *testing.T, pid int) procfs.Status {
	t.Helper()
	return procfstest.Parse(t, strconv.Itoa(pid)+"/status", procfs.ParseStatus)
}

func readStack(t *testing.T, pid int) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stack")
	if err != nil {
		t.Fatal(err)
	}
	return procfs.ParseStack(data)
}

// blockedTask returns a thread of pid in request_wait_answer, or 0.
func blockedTask(t *testing.T, pid int) int {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		data, err := os.ReadFile(dir + "/" + task.Name() + "/stack")
		if err != nil {
			continue
		}
		if slices.Contains(procfs.ParseStack(data), "request_wait_answer") {
			tid, _ := strconv.Atoi(task.Name())
			return tid
		}
	}
	return 0
}

func fusectlMounted(t *testing.T) bool {
	t.Helper()
	m, ok := findMount(t, hangfs.FusectlDir)
	return ok && m.FSType == "fusectl"
}

func findMount(t *testing.T, dir string) (procfs.Mount, bool) {
	t.Helper()
	var found procfs.Mount
	ok := false
	for _, m := range procfstest.SelfMounts(t) {
		if m.Mountpoint == dir {
			found, ok = m, true
		}
	}
	return found, ok
}

func mountAt(t *testing.T, dir string) procfs.Mount {
	t.Helper()
	m, ok := findMount(t, dir)
	if !ok {
		t.Fatalf("no mount at %s", dir)
	}
	return m
}
