package agent_test

// The seven teardown cases end to end, on the real kernel: an epilogue within
// grace, a daemon left behind, SIGTERM ignored, a process unkillable on FUSE,
// a main thread exited, the agent killed during a teardown, and an idle agent
// that does not poll.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/agent/cgroup"
	"github.com/gracewatch/gracewatch/agent/diagnose"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/internal/testutil/hangfs"
)

// 1. An epilogue that finishes within grace: teardown with free_at = D, then
// up; no signal was sent.
func TestEpilogWithinGrace(t *testing.T) {
	n := startNode(t, nodeOpts{grace: "5s"})
	n.jobStart("101", time.Now().Add(time.Hour))
	ep := n.epilog("101", "sh", "-c", "sleep 1; echo done; echo warn >&2")
	st := n.waitFor("teardown", 5*time.Second, func(st api.Status) bool { return st.State == api.StateTeardown })
	j := st.Jobs[0]
	if st.FreeAt == nil || j.Deadline == nil || !st.FreeAt.Equal(*j.Deadline) {
		t.Fatalf("free_at %v, deadline %v: want equal", st.FreeAt, j.Deadline)
	}
	if got := j.Deadline.Sub(*j.Ended); got != 5*time.Second {
		t.Fatalf("D - T_end = %v, want the grace 5s", got)
	}
	if code := waitExit(t, ep, 10*time.Second); code != 0 {
		t.Fatalf("epilog exit %d, stderr %s", code, ep.Stderr)
	}
	if got := ep.Stdout.(*bytes.Buffer).String(); got != "done\n" {
		t.Fatalf("epilog stdout %q", got)
	}
	if got := ep.Stderr.(*bytes.Buffer).String(); got != "warn\n" {
		t.Fatalf("epilog stderr %q", got)
	}
	st = n.waitFor("up", 5*time.Second, func(st api.Status) bool { return st.State == api.StateUp })
	if j := st.Jobs[0]; j.Phase != api.PhaseReleased || j.Outcome != "clean" || j.Escalation != "" {
		t.Fatalf("job %+v: want released, clean, no escalation", j)
	}
	if time.Now().After(*j.Deadline) {
		t.Fatalf("released after the deadline")
	}
}

// 2. An epilogue that leaves a double-forked setsid daemon behind: the
// teardown waits for it; at D it is killed and the node is DOWN with a reason
// naming it.
func TestDaemonLeftBehind(t *testing.T) {
	n := startNode(t, nodeOpts{grace: "3s"})
	n.jobStart("102", time.Now().Add(time.Hour))
	ep := n.epilog("102", "sh", "-c", "(setsid sleep 300 </dev/null >/dev/null 2>&1 &); exit 0")
	if code := waitExit(t, ep, 5*time.Second); code != 0 {
		t.Fatalf("epilog exit %d", code)
	}
	procs, err := cgroup.Procs(n.root)
	if err != nil || len(procs) != 1 {
		t.Fatalf("processes left in the job cgroups: %v %v", procs, err)
	}
	daemon := procs[0]
	// The agent reaped the epilogue before it answered the wrapper: its
	// decision on the teardown is made. (Were it wrongly released, the
	// DOWN below could not name the daemon either.)
	if st := n.status(); st.State != api.StateTeardown {
		t.Fatalf("state %s with the daemon alive, want teardown", st.State)
	}
	st := n.waitFor("down", 6*time.Second, func(st api.Status) bool { return st.State == api.StateDown })
	if !strings.Contains(st.Reason, "sleep") || !strings.Contains(st.Reason, strconv.Itoa(daemon)) {
		t.Fatalf("reason %q does not name the daemon (pid %d, sleep)", st.Reason, daemon)
	}
	n.waitFor("released", 5*time.Second, func(st api.Status) bool { return st.Jobs[0].Phase == api.PhaseReleased })
	if alive(daemon) {
		t.Fatalf("daemon %d still alive", daemon)
	}
	if st := n.status(); st.State != api.StateDown || st.Jobs[0].Outcome != diagnose.OutcomeTerminated {
		t.Fatalf("state %s outcome %q, want down/terminated", st.State, st.Jobs[0].Outcome)
	}
}

// 3. A process that ignores SIGTERM: killed after kill_wait; the node is
// DOWN and the report says killed.
func TestIgnoresSIGTERM(t *testing.T) {
	n := startNode(t, nodeOpts{grace: "2s", killWait: "1s"})
	n.jobStart("103", time.Now().Add(time.Hour))
	ep := n.epilog("103", "sh", "-c", "trap '' TERM; exec sleep 300")
	st := n.waitFor("down", 6*time.Second, func(st api.Status) bool { return st.State == api.StateDown })
	term := time.Now()
	if code := waitExit(t, ep, 5*time.Second); code != 128+int(syscall.SIGKILL) {
		t.Fatalf("epilog exit %d, want %d (SIGKILL)", code, 128+int(syscall.SIGKILL))
	}
	st = n.waitFor("released", 5*time.Second, func(st api.Status) bool { return st.Jobs[0].Phase == api.PhaseReleased })
	if time.Since(term) < 500*time.Millisecond && st.Jobs[0].Escalation != "kill" {
		t.Fatalf("escalation %q", st.Jobs[0].Escalation)
	}
	if st.State != api.StateDown || st.Jobs[0].Outcome != diagnose.OutcomeKilled {
		t.Fatalf("state %s outcome %q, want down/killed", st.State, st.Jobs[0].Outcome)
	}
	if !strings.Contains(st.Reason, "killed") {
		t.Fatalf("reason %q does not say killed", st.Reason)
	}
	rs := n.reports()
	if len(rs) != 1 || rs[0].Outcome != diagnose.OutcomeKilled || rs[0].Job != "103" {
		t.Fatalf("reports %+v, want one for job 103 saying killed", rs)
	}
	if rs[0].Timeline.Term == nil || rs[0].Timeline.Kill == nil || rs[0].Timeline.Kill.Sub(*rs[0].Timeline.Term) < 900*time.Millisecond {
		t.Fatalf("timeline %+v: want SIGKILL kill_wait after SIGTERM", rs[0].Timeline)
	}
	files, _ := filepath.Glob(filepath.Join(n.dir, "state", "reports", "*.json"))
	if len(files) == 0 {
		t.Fatal("no report saved under the state dir")
	}
}

// 4. A truly unkillable process (a reader of a FUSE file that never
// answers): classified unkillable with request_wait_answer and SIGKILL
// pending; with auto_resume = "when-clean" the node comes back once the FUSE
// server ends, with "never" it stays DOWN until nodeagent resume.
func TestUnkillableFUSE(t *testing.T) {
	for _, policy := range []string{"when-clean", "never"} {
		t.Run(policy, func(t *testing.T) {
			n := startNode(t, nodeOpts{grace: "2s", killWait: "1s", unkillableAfter: "1s", autoResume: policy})
			fs := hangfs.Start(t)
			n.jobStart("104", time.Now().Add(time.Hour))
			ep := n.epilog("104", "cat", fs.Path("hang"))
			st := n.waitFor("unkillable", 15*time.Second, func(st api.Status) bool {
				return len(st.Hung) > 0 && st.Hung[0].Class == string(diagnose.Unkillable)
			})
			h := st.Hung[0]
			if h.Comm != "cat" || h.State != "D" {
				t.Fatalf("hung %+v, want cat in D", h)
			}
			if st.State != api.StateDown || !strings.Contains(st.Reason, "unkillable") || !strings.Contains(st.Reason, "request_wait_answer") {
				t.Fatalf("state %s reason %q", st.State, st.Reason)
			}
			rs := n.reports()
			if len(rs) != 1 || len(rs[0].Processes) != 1 {
				t.Fatalf("reports: %+v", rs)
			}
			p := rs[0].Processes[0]
			th := p.Threads[0]
			if !th.KillPending || !(strings.Contains(th.Wchan, "request_wait_answer") || strings.Contains(strings.Join(th.Stack, " "), "request_wait_answer")) {
				t.Fatalf("thread %+v: want SIGKILL pending and request_wait_answer", th)
			}
			files, _ := filepath.Glob(filepath.Join(n.dir, "state", "reports", "*.json"))
			if len(files) == 0 {
				t.Fatal("no report saved")
			}
			fs.Stop()
			if code := waitExit(t, ep, 10*time.Second); code == 0 {
				t.Fatalf("cat exited 0 after the FUSE server ended")
			}
			st = n.waitFor("released", 10*time.Second, func(st api.Status) bool { return st.Jobs[0].Phase == api.PhaseReleased })
			if policy == "when-clean" {
				n.waitFor("up", 5*time.Second, func(st api.Status) bool { return st.State == api.StateUp })
				return
			}
			// The release and the auto-resume decision are one step of
			// the supervisor: released, the latch is what it stays.
			if st := n.status(); st.State != api.StateDown {
				t.Fatalf("never: state %s, want down until resume", st.State)
			}
			if _, e, code := n.cli("resume", "--reason", "FUSE server restarted"); code != 0 {
				t.Fatalf("resume: %d %s", code, e)
			}
			if st := n.status(); st.State != api.StateUp {
				t.Fatalf("after resume: %s", st.State)
			}
		})
	}
}

const mainExitC = `
#include <pthread.h>
#include <signal.h>
#include <unistd.h>
static void *spin(void *a) { for (;;) pause(); return 0; }
int main(void) {
	pthread_t t;
	signal(SIGTERM, SIG_IGN);
	pthread_create(&t, 0, spin, 0);
	pthread_exit(0);
}
`

// 5. A process whose main thread has exited while another thread runs: the
// cgroup still empties.
func TestMainThreadExited(t *testing.T) {
	testutil.RequireRoot(t)
	gcc, err := exec.LookPath("gcc")
	testutil.Require(t, err == nil, "needs gcc")
	src := filepath.Join(t.TempDir(), "mainexit.c")
	bin := filepath.Join(t.TempDir(), "mainexit")
	os.WriteFile(src, []byte(mainExitC), 0o600)
	if out, err := exec.Command(gcc, "-pthread", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	os.Chmod(filepath.Dir(bin), 0o755)
	n := startNode(t, nodeOpts{grace: "2s", killWait: "1s"})
	n.jobStart("105", time.Now().Add(time.Hour))
	ep := n.epilog("105", bin)
	// Prove the state: main thread a zombie, the other thread alive.
	var pid int
	var procs []int
	var status []byte
	if !testutil.Poll(30*time.Second, func() bool {
		if procs, _ = cgroup.Procs(n.root); len(procs) == 1 {
			status, _ = os.ReadFile(fmt.Sprintf("/proc/%d/status", procs[0]))
			if bytes.Contains(status, []byte("State:\tZ")) && bytes.Contains(status, []byte("Threads:\t2")) {
				pid = procs[0]
			}
		}
		return pid != 0
	}) {
		t.Fatalf("the helper never reached main-thread-exited state: cgroup lists %v, status of the first:\n%s", procs, status)
	}
	st := n.waitFor("released", 10*time.Second, func(st api.Status) bool { return st.Jobs[0].Phase == api.PhaseReleased })
	if st.Jobs[0].Outcome != diagnose.OutcomeKilled {
		t.Fatalf("outcome %q, want killed", st.Jobs[0].Outcome)
	}
	if alive(pid) {
		t.Fatalf("pid %d still alive", pid)
	}
	waitExit(t, ep, 5*time.Second)
}

// 6. kill -9 of the agent during a teardown, then a restart: the epilogue
// was not killed by it and the deadline is still enforced.
func TestAgentCrashDuringTeardown(t *testing.T) {
	n := startNode(t, nodeOpts{grace: "4s", killWait: "1s"})
	n.jobStart("106", time.Now().Add(time.Hour))
	marker := filepath.Join(n.dir, "ticks")
	// The epilogue writes to its stdout all the time: with a pipe to the
	// agent it would die of SIGPIPE when the agent does.
	ep := n.epilog("106", "sh", "-c", fmt.Sprintf("trap '' TERM; while :; do echo tick; echo x >> %s; sleep 0.1; done", marker))
	st := n.waitFor("teardown", 5*time.Second, func(st api.Status) bool { return st.State == api.StateTeardown })
	deadline := *st.Jobs[0].Deadline
	procs, _ := cgroup.Procs(n.root)
	if len(procs) == 0 {
		t.Fatal("no epilogue process")
	}
	shell := procs[0]
	n.crash()
	waitExit(t, ep, 5*time.Second) // the wrapper loses its agent
	size := func() int64 {
		fi, err := os.Stat(marker)
		if err != nil {
			return 0 // not written yet: a loaded machine starts the shell late
		}
		return fi.Size()
	}
	before := size()
	if !testutil.Poll(5*time.Second, func() bool { return alive(shell) && size() > before }) {
		t.Fatalf("epilogue %d died with the agent (alive %v, output %d → %d bytes)", shell, alive(shell), before, size())
	}
	n.start()
	st = n.status()
	if st.State != api.StateTeardown || st.FreeAt == nil || !st.FreeAt.Equal(deadline) {
		t.Fatalf("after restart: state %s free_at %v, want teardown with free_at %v", st.State, st.FreeAt, deadline)
	}
	if !alive(shell) {
		t.Fatal("the restart killed the epilogue")
	}
	st = n.waitFor("down", time.Until(deadline)+3*time.Second, func(st api.Status) bool { return st.State == api.StateDown })
	if late := time.Since(deadline); late > 2*time.Second {
		t.Fatalf("down %v after the deadline", late)
	}
	n.waitFor("released", 5*time.Second, func(st api.Status) bool { return st.Jobs[0].Phase == api.PhaseReleased })
	if alive(shell) {
		t.Fatal("epilogue still alive after escalation")
	}
}

// 7. The idle agent does no periodic /proc or cgroup reads: its read
// syscall count (/proc/PID/io syscr) does not move while nothing happens.
func TestIdleAgentDoesNotPoll(t *testing.T) {
	n := startNode(t, nodeOpts{})
	n.jobStart("107", time.Now().Add(time.Hour))
	// The start's last read is the API connection's end (EOF), before the
	// agent closes it: wait until it holds its listening socket alone (this
	// node has no mesh and no metrics listener).
	var fds []string
	if !testutil.Poll(30*time.Second, func() bool {
		fds = sockets(t, n.cmd.Process.Pid)
		return len(fds) == 1
	}) {
		t.Fatalf("the agent holds the sockets %q 30 s after the job's start, want its listener alone", fds)
	}
	syscr := func() int64 {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", n.cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "syscr: "); ok {
				x, _ := strconv.ParseInt(v, 10, 64)
				return x
			}
		}
		t.Fatal("no syscr in /proc/PID/io")
		return 0
	}
	before := syscr()
	// An idle agent is one to which nothing happens, so no event of its
	// own can close the window: a loop round it is made to run (the
	// watchdog's pings) wakes the Go runtime, whose own reads (its eventfd,
	// the cgroup's CPU quota for GOMAXPROCS) move syscr. A slow machine can
	// only hide a poll here (the agent did not run), never fail the test.
	// not a wait: the idle time is the scenario
	time.Sleep(3 * time.Second)
	if got := syscr() - before; got != 0 {
		t.Fatalf("idle agent made %d read syscalls in 3s", got)
	}
	// The measurement can fail: one status request does reads.
	n.status()
	if syscr() == before {
		t.Fatal("syscr did not move for a request: the measurement sees nothing")
	}
}

// sockets lists the socket file descriptors that process pid holds.
func sockets(t testing.TB, pid int) []string {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(l, "socket:") {
			out = append(out, e.Name()+" -> "+l)
		}
	}
	return out
}
