package agent_test

// The agent as a systemd service: sd_notify (READY, STATUS, the watchdog's
// pings, STOPPING), and a restart during an epilogue, as a package upgrade
// does.

import (
	"bytes"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/internal/testutil"

	"golang.org/x/sys/unix"
)

// The agent speaks sd_notify: READY once serving, STATUS lines that say what
// it does, WATCHDOG pings through its main loop, STOPPING at exit. The test
// plays systemd's part with a datagram socket of its own.
func TestSystemdNotify(t *testing.T) {
	testutil.RequireRoot(t)
	sockPath, conn := testutil.ListenNotify(t)
	// The datagrams are read here, on the test goroutine, with deadlines:
	// what the agent sent is in the socket's queue until then, so "nothing
	// more" is a read that times out, not a guess about a reader's lag.
	var seen []string
	buf := make([]byte, 4096)
	add := func(n int) {
		for _, line := range strings.Split(string(buf[:n]), "\n") {
			if line != "" {
				seen = append(seen, line)
			}
		}
	}
	// recv appends the lines of the next datagram to seen; false when none
	// comes before deadline.
	recv := func(deadline time.Time) bool {
		t.Helper()
		conn.SetReadDeadline(deadline)
		n, _, err := conn.ReadFromUnix(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return false
		}
		if err != nil {
			t.Fatalf("read the notify socket: %v", err)
		}
		add(n)
		return true
	}
	// queued appends the lines of a datagram already queued, without
	// waiting; false when the queue is empty.
	raw, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	queued := func() bool {
		t.Helper()
		var n int
		var rerr error
		if err := raw.Read(func(fd uintptr) bool {
			n, _, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if errors.Is(rerr, unix.EAGAIN) {
			return false
		}
		if rerr != nil {
			t.Fatalf("read the notify socket: %v", rerr)
		}
		add(n)
		return true
	}
	// expect returns the first message since index from with the prefix,
	// waiting for it at most within.
	expect := func(from int, prefix string, within time.Duration) int {
		t.Helper()
		deadline := time.Now().Add(within)
		for i := from; ; i++ {
			for i >= len(seen) {
				if !recv(deadline) {
					t.Fatalf("no %q from the agent within %v; got %q", prefix, within, seen[from:])
				}
			}
			if strings.HasPrefix(seen[i], prefix) {
				return i
			}
		}
	}
	os.Setenv("NOTIFY_SOCKET", sockPath)
	os.Setenv("WATCHDOG_USEC", "400000")
	n := startNode(t, nodeOpts{})
	os.Unsetenv("NOTIFY_SOCKET")
	os.Unsetenv("WATCHDOG_USEC")
	expect(0, "READY=1", 5*time.Second)
	if i := expect(0, "STATUS=", 5*time.Second); !strings.Contains(seen[i], "node up") {
		t.Fatalf("status line %q", seen[i])
	}
	expect(0, "WATCHDOG=1", 2*time.Second)
	// A frozen main loop stops the pings: freeze the whole agent and see
	// that nothing comes while it is stopped.
	// Stopped (every thread, not only the main one), it sends nothing
	// more: what it sent before is in the socket's queue (a unix datagram
	// is queued when send returns), read up to the queue's end.
	testutil.Freeze(t, n.cmd.Process.Pid)
	for queued() {
	}
	if from := len(seen); recv(time.Now().Add(time.Second)) {
		t.Fatalf("message %q from a stopped agent", seen[from:])
	}
	n.cmd.Process.Signal(syscall.SIGCONT)
	mark := expect(len(seen), "WATCHDOG=1", 2*time.Second)
	n.jobStart("901", time.Now().Add(time.Hour))
	ep := n.epilog("901", "sleep", "1")
	expect(mark, "STATUS=1 teardowns, node teardown", 5*time.Second)
	waitExit(t, ep, 5*time.Second)
	n.stop()
	expect(mark, "STOPPING=1", 5*time.Second)
	// The stop may take stop_wait (20 s by default) and more: systemd is
	// told, so that a TimeoutStopSec shorter than that does not kill the
	// agent before it left the mesh.
	i := expect(mark, "EXTEND_TIMEOUT_USEC=", 5*time.Second)
	usec, err := strconv.ParseInt(strings.TrimPrefix(seen[i], "EXTEND_TIMEOUT_USEC="), 10, 64)
	if min := (20*time.Second + shutdownTimeoutForTest).Microseconds(); err != nil || usec < min {
		t.Fatalf("%q: want at least %d µs (stop_wait and the API's shutdown)", seen[i], min)
	}
}

// shutdownTimeoutForTest is agent.shutdownTimeout.
const shutdownTimeoutForTest = 5 * time.Second

// An agent restart (a package upgrade) during an epilogue does not fail
// the exec system's epilog: the stopping agent waits for the attached
// epilogue and hands its exit status to the wrapper, and a wrapper that
// starts while no agent runs waits for the next one.
func TestAgentRestartDuringEpilog(t *testing.T) {
	n := startNode(t, nodeOpts{grace: "30s"})
	ep := n.epilog("301", "sh", "-c", "sleep 1.5; echo done; exit 3")
	n.waitFor("teardown", 5*time.Second, func(st api.Status) bool { return st.State == api.StateTeardown })
	stopAt := time.Now()
	n.cmd.Process.Signal(syscall.SIGTERM)
	// No agent listens now (it drains): this wrapper waits for the next one.
	testutil.Eventually(t, 5*time.Second, "the stopping agent refusing connections", func() bool {
		c, err := net.Dial("unix", n.socket)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	late := n.epilog("302", "sh", "-c", "echo late; exit 0")
	if code := waitExit(t, ep, 10*time.Second); code != 3 {
		t.Fatalf("the wrapper of the epilogue running across the stop exited %d, want its status 3\nstdout %q stderr %q\nagent logs:\n%s",
			code, ep.Stdout, ep.Stderr, n.logs)
	}
	if out := ep.Stdout.(*bytes.Buffer).String(); !strings.Contains(out, "done") {
		t.Fatalf("wrapper output %q, want the epilogue's", out)
	}
	if err := n.cmd.Wait(); err != nil {
		t.Fatalf("agent exit: %v", err)
	}
	t.Logf("agent stopped %v after SIGTERM, once the epilogue ended", time.Since(stopAt).Round(time.Millisecond))
	// Its log is complete now (the next agent writes to the same buffer).
	if !strings.Contains(n.logs.String(), "epilog streams ended") {
		t.Fatalf("the agent did not log its drain:\n%s", n.logs)
	}
	if late.ProcessState != nil {
		t.Fatalf("the late wrapper gave up while no agent ran: exit %d, stderr %q", late.ProcessState.ExitCode(), late.Stderr)
	}
	n.start()
	if code := waitExit(t, late, 10*time.Second); code != 0 {
		t.Fatalf("the late wrapper exited %d, want 0; stderr %q", code, late.Stderr)
	}
	if out := late.Stdout.(*bytes.Buffer).String(); !strings.Contains(out, "late") {
		t.Fatalf("late wrapper output %q", out)
	}
}
