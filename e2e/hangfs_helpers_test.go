package e2e

// hangfs-serve (internal/testutil/hangfs) as a process of its own: the FUSE
// file system whose reads never answer, on which the scheduler and cluster
// tests' epilogues hang.

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/internal/testutil/hangfs"
)

// hangServer is hangfs-serve (internal/testutil/hangfs) as a process of its
// own, mounted at mnt: reads of mnt/hang never answer until it is stopped.
type hangServer struct {
	t     testing.TB
	mnt   string
	cmd   *exec.Cmd
	done  chan struct{}
	ready chan struct{} // closed when the server says hangfs.ReadyLine
	reads chan struct{} // one value per read of "hang" the server took
	logs  *testutil.SyncBuffer
	once  sync.Once
	err   error
}

var hangfsBin struct {
	sync.Once
	path string
	err  error
}

// buildHangfs builds hangfs-serve once, beside the test's other binaries.
func buildHangfs(t testing.TB) string {
	t.Helper()
	hangfsBin.Do(func() {
		hangfsBin.path = filepath.Join(filepath.Dir(bins.nodeagent), "hangfs-serve")
		out, err := exec.Command("go", "build", "-o", hangfsBin.path,
			"github.com/gracewatch/gracewatch/internal/testutil/hangfs/hangfs-serve").CombinedOutput()
		if err != nil {
			hangfsBin.err = fmt.Errorf("build hangfs-serve: %v\n%s", err, out)
		}
	})
	if hangfsBin.err != nil {
		t.Fatal(hangfsBin.err)
	}
	return hangfsBin.path
}

// startHangfs mounts hangfs at mnt (created) and waits, at most 10 s, until
// the server says it is ready (its own look at the mount while mounting is
// over). It is stopped when the test ends, if not before.
func startHangfs(t testing.TB, mnt string) *hangServer {
	t.Helper()
	bin := buildHangfs(t)
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	h := &hangServer{t: t, mnt: mnt, done: make(chan struct{}), ready: make(chan struct{}), reads: make(chan struct{}, 64), logs: &testutil.SyncBuffer{}}
	h.cmd = exec.Command(bin, mnt)
	h.cmd.Stderr = h.logs
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := h.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			switch sc.Text() {
			case hangfs.ReadyLine:
				close(h.ready)
			case "hung-read":
				h.reads <- struct{}{}
			}
		}
		h.cmd.Wait()
		close(h.done)
	}()
	t.Cleanup(func() {
		if err := h.stop(); err != nil {
			t.Error(err)
		}
	})
	select {
	case <-h.ready:
	case <-h.done:
		t.Fatalf("hangfs-serve exited before mounting %s: %s", mnt, h.logs)
	case <-time.After(10 * time.Second):
		t.Fatalf("hangfs-serve: not ready at %s after 10 s: %s", mnt, h.logs)
	}
	return h
}

func (h *hangServer) file() string { return filepath.Join(h.mnt, "hang") }

// waitRead waits (at most timeout) for the next read of "hang" the server
// took and will never answer.
func (h *hangServer) waitRead(timeout time.Duration) {
	h.t.Helper()
	select {
	case <-h.reads:
	case <-h.done:
		h.t.Fatalf("hangfs-serve exited: %s", h.logs)
	case <-time.After(timeout):
		h.t.Fatalf("no read of %s within %v", h.file(), timeout)
	}
}

// stop aborts the server's FUSE connection (the hung reader gets an error,
// and so would a thread of the server waiting on its own mount, which
// SIGKILL alone leaves in D for ever), kills the server by its pid, then
// unmounts and removes the mountpoint.
func (h *hangServer) stop() error {
	h.once.Do(func() {
		if err := hangfs.AbortConnection(h.mnt); err != nil {
			h.err = err
		}
		h.cmd.Process.Kill()
		select {
		case <-h.done:
		case <-time.After(10 * time.Second):
			h.err = errors.Join(h.err, fmt.Errorf("hangfs-serve pid %d did not exit within 10 s of its connection's abort and SIGKILL", h.cmd.Process.Pid))
			return
		}
		if err := syscall.Unmount(h.mnt, syscall.MNT_DETACH); err != nil && err != syscall.EINVAL && err != syscall.ENOENT {
			h.err = errors.Join(h.err, fmt.Errorf("unmount %s: %v", h.mnt, err))
			return
		}
		if err := os.Remove(h.mnt); err != nil && !os.IsNotExist(err) {
			h.err = errors.Join(h.err, err)
		}
	})
	return h.err
}
