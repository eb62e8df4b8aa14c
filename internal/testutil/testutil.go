// Package testutil holds helpers shared by gracewatch's tests.
package testutil

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// InCI reports whether the tests run in CI (CI=true), where a missing kernel
// feature or privilege is a failure rather than a reason to skip.
func InCI() bool { return os.Getenv("CI") == "true" }

// Require skips the test with reason when ok is false, or fails it in CI, so
// that a skipped suite can never pass for a green one.
func Require(t testing.TB, ok bool, reason string) {
	t.Helper()
	if ok {
		return
	}
	if InCI() {
		t.Fatalf("required in CI: %s", reason)
	}
	t.Skip(reason)
}

// RequireRoot is Require(t, euid == 0, ...).
func RequireRoot(t testing.TB) {
	t.Helper()
	Require(t, os.Geteuid() == 0, "needs root")
}

// SyncBuffer is a bytes.Buffer that may be written and read concurrently:
// the output of a process (os/exec copies it on goroutines of its own) or a
// logger that a test reads while the code under test writes. With Max
// above zero, what is written once it holds Max bytes is dropped (and
// reported written): a test's chatty process cannot fill its memory.
type SyncBuffer struct {
	Max int
	mu  sync.Mutex
	b   bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Max > 0 && s.b.Len() >= s.Max {
		return len(p), nil
	}
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// HasLine reports whether one line of what was written holds every one of
// words (a log line with its message and its attributes).
func (s *SyncBuffer) HasLine(words ...string) bool {
	for _, line := range strings.Split(s.String(), "\n") {
		all := true
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all {
			return true
		}
	}
	return false
}

// BuildPrograms builds the named programs of cmd/ ("nodeagent",
// "nodeagentd", "aggregator") into dir as packaging/build.sh builds them:
// without cgo, stripped, with immediate binding; position-independent,
// except nodeagent, the client that runs for every job, a static
// executable at a fixed address. nodeagent serve re-executes the nodeagentd
// beside it.
func BuildPrograms(dir string, names ...string) error {
	for _, name := range names {
		mode := "-buildmode=pie"
		if name == "nodeagent" {
			mode = "-buildmode=exe"
		}
		build := exec.Command(GoTool(), "build", "-trimpath", mode, "-ldflags", "-s -w -bindnow", "-o", dir+"/",
			"github.com/gracewatch/gracewatch/cmd/"+name)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %v\n%s", name, err, out)
		}
	}
	return nil
}

// ProgramsDir is BuildPrograms for a TestMain: it builds the named
// programs into a new temporary folder and returns it with the function
// that removes it. A failure ends the process (exit 1), saying why.
func ProgramsDir(names ...string) (dir string, remove func()) {
	dir, err := os.MkdirTemp("", "gw-bin")
	if err == nil {
		err = BuildPrograms(dir, names...)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	return dir, func() { os.RemoveAll(dir) }
}

// ListenNotify plays systemd's part for a daemon's sd_notify: a datagram
// socket in a new short temporary folder (a socket path must stay under
// 108 bytes), closed and removed when the test ends. The daemon is told
// its path in NOTIFY_SOCKET.
func ListenNotify(t testing.TB) (path string, conn *net.UnixConn) {
	t.Helper()
	dir, err := os.MkdirTemp("", "gwnotify")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path = filepath.Join(dir, "notify")
	conn, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return path, conn
}

// GoTool is the go command for tests that build or list packages: the
// one on PATH (go test's own, under make and .ci/run), else where the
// toolchain is installed here.
func GoTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "/usr/local/go/bin/go"
}

// Closed reports, without waiting, whether ch is closed: whether the
// process or server that closes it when it ends has ended.
func Closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Start starts cmd, failing t if it cannot, and kills and reaps it when the
// test ends unless the test waited for it: no process of the test outlives
// it.
func Start(t testing.TB, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd
}

// Stop ends cmd, started by the test and waited for by nobody else: SIGCONT
// (in case the test froze it), SIGTERM, and SIGKILL if it has not exited
// within grace. It reaps the process and reports whether it had to kill it.
func Stop(cmd *exec.Cmd, grace time.Duration) (killed bool) {
	cmd.Process.Signal(syscall.SIGCONT)
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
		return false
	case <-time.After(grace):
		cmd.Process.Kill()
		<-done
		return true
	}
}
