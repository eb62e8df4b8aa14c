// Package cgrouptest gives tests a throw-away cgroup v2 subtree on the real
// kernel, cleaned up (processes killed, cgroups removed) when the test ends.
package cgrouptest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gracewatch/gracewatch/agent/cgroup"
	"github.com/gracewatch/gracewatch/internal/testutil"
)

// CleanupTimeout bounds how long the cleanup of TempRoot waits for the
// killed processes to leave the cgroup.
const CleanupTimeout = 5 * time.Second

// Mount returns where the cgroup v2 hierarchy is mounted on this host, as
// the agent finds it in /proc/self/mountinfo (/sys/fs/cgroup on a pure v2
// host, /sys/fs/cgroup/unified on a hybrid one): tests derive their paths
// from it, never from one host's layout. Without root or cgroup v2 the test
// is skipped, or failed when CI=true.
func Mount(t testing.TB) string {
	t.Helper()
	mount := fromMountinfo(t, cgroup.FindMount, "no cgroup v2")
	var st unix.Statfs_t
	if err := unix.Statfs(mount, &st); err != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		testutil.Require(t, false, fmt.Sprintf("%s is not a cgroup2 file system (statfs: %v)", mount, err))
	}
	return mount
}

// fromMountinfo reads /proc/self/mountinfo with find, as root. Without
// root, the file or what find looks for (failing says why not), the test
// is skipped with that reason, or failed when CI=true.
func fromMountinfo[T any](t testing.TB, find func(mountinfo io.Reader) (T, error), why string) T {
	t.Helper()
	testutil.RequireRoot(t)
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		testutil.Require(t, false, fmt.Sprintf("no /proc/self/mountinfo: %v", err))
	}
	defer f.Close()
	v, err := find(f)
	if err != nil {
		testutil.Require(t, false, fmt.Sprintf("%s: %v", why, err))
	}
	return v
}

// TempRoot creates <cgroup2 mount>/gwtest-<random> and returns its absolute
// path. A t.Cleanup kills every process still in that subtree (only the pids
// listed in its cgroup.procs files, through pidfds, plus cgroup.kill), waits
// up to CleanupTimeout for "populated 0" (on inotify, not by polling), and
// removes the cgroups deepest first; a failure there fails the test. Without
// root or cgroup v2 the test is skipped, or failed when CI=true. Call it from
// the test goroutine.
func TempRoot(t testing.TB) string {
	t.Helper()
	mount := Mount(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	dir := filepath.Join(mount, "gwtest-"+hex.EncodeToString(b[:]))
	if err := os.Mkdir(dir, 0o755); err != nil {
		testutil.Require(t, false, fmt.Sprintf("cannot create a cgroup: %v", err))
	}
	t.Cleanup(func() {
		if err := destroy(dir); err != nil {
			t.Errorf("clean up test cgroup: %v", err)
		}
	})
	return dir
}

// destroy kills the processes of dir's subtree, waits for it to empty, and
// removes it.
func destroy(dir string) error {
	var errs []error
	// Watch before killing, so the change to "populated 0" is not missed.
	wait, err := watchEmpty(dir)
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, "cgroup.kill"), "1"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("write %s/cgroup.kill: %w", dir, err))
	}
	pids, err := cgroup.Procs(dir)
	if err != nil {
		errs = append(errs, err)
	}
	for _, pid := range pids {
		// cgroup.kill misses processes whose main thread has exited:
		// kill each listed pid through a pidfd too.
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue // gone
		}
		if inSubtree(pid, dir) {
			_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		}
		unix.Close(fd)
	}
	if err := wait(CleanupTimeout); err != nil {
		errs = append(errs, err)
	}
	if err := removeTree(dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// watchEmpty adds an inotify watch on dir/cgroup.events and returns a
// function that blocks until dir is not populated, or the timeout.
func watchEmpty(dir string) (func(time.Duration) error, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	events := filepath.Join(dir, "cgroup.events")
	if _, err := unix.InotifyAddWatch(fd, events, unix.IN_MODIFY); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.ENOENT) {
			return func(time.Duration) error { return nil }, nil
		}
		return nil, fmt.Errorf("watch %s: %w", events, err)
	}
	return func(timeout time.Duration) error {
		defer unix.Close(fd)
		deadline := time.Now().Add(timeout)
		buf := make([]byte, 4096)
		for {
			populated, err := cgroup.Populated(dir)
			if err != nil {
				return err
			}
			if !populated {
				return nil
			}
			left := time.Until(deadline)
			if left <= 0 {
				pids, _ := cgroup.Procs(dir)
				return fmt.Errorf("cgroup %s still populated %v after kill (pids %v)", dir, timeout, pids)
			}
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			if _, err := unix.Poll(pfd, int(left.Milliseconds())+1); err != nil && !errors.Is(err, unix.EINTR) {
				return fmt.Errorf("poll inotify: %w", err)
			}
			if pfd[0].Revents&unix.POLLIN != 0 {
				_, _ = unix.Read(fd, buf)
			}
		}
	}, nil
}

// inSubtree reports whether /proc/<pid>/cgroup places pid in dir's subtree.
func inSubtree(pid int, dir string) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	own, err := cgroup.OwnCgroup(strings.NewReader(string(data)))
	if err != nil {
		return false
	}
	rel := strings.TrimPrefix(dir, filepath.Dir(dir))
	// dir is <mount>/gwtest-x: its 0:: path is /gwtest-x.
	return own == rel || strings.HasPrefix(own, rel+"/")
}

// removeTree removes dir and its descendants, deepest first.
func removeTree(dir string) error {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	slices.Reverse(dirs)
	for _, d := range dirs {
		if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove cgroup %s: %w", d, err)
		}
	}
	return nil
}

func writeFile(file, s string) error {
	f, err := os.OpenFile(file, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(s)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return werr
}

// V1Mount returns where the cgroup v1 hierarchy of controller (a hybrid
// host's "freezer", say) is mounted, from /proc/self/mountinfo. Without
// root or that hierarchy (every pure cgroup v2 host) the test is skipped
// with that reason, or failed when CI=true.
func V1Mount(t testing.TB, controller string) string {
	t.Helper()
	mounts := fromMountinfo(t, cgroup.FindV1Mounts, "read cgroup v1 mounts")
	for _, m := range mounts {
		if slices.Contains(strings.Split(m.Controllers, ","), controller) {
			return m.Mountpoint
		}
	}
	testutil.Require(t, false, fmt.Sprintf("needs the cgroup v1 %s hierarchy (a hybrid host; a pure cgroup v2 host has none)", controller))
	return ""
}

// TempV1 creates <mount of the v1 hierarchy controller>/gwtest-<random> (a
// hybrid host's freezer, say) and returns its absolute path and its path
// within the hierarchy ("/gwtest-..."). A t.Cleanup SIGKILLs every process
// listed in the subtree's cgroup.procs (by pidfd, after checking each is
// still there), waits up to CleanupTimeout for the lists to empty (v1 has
// no populated flag: polled), and removes the cgroups deepest
// first. Without root or that hierarchy the test is skipped, or failed when
// CI=true. Call it from the test goroutine.
func TempV1(t testing.TB, controller string) (dir, rel string) {
	t.Helper()
	mp := V1Mount(t, controller)
	var b [6]byte
	_, _ = rand.Read(b[:])
	rel = "/gwtest-" + hex.EncodeToString(b[:])
	dir = mp + rel
	if err := os.Mkdir(dir, 0o755); err != nil {
		testutil.Require(t, false, fmt.Sprintf("cannot create a v1 cgroup: %v", err))
	}
	t.Cleanup(func() {
		if err := destroyV1(dir); err != nil {
			t.Errorf("clean up test v1 cgroup: %v", err)
		}
	})
	return dir, rel
}

func destroyV1(dir string) error {
	var pids []int
	var err error
	emptied := testutil.Poll(CleanupTimeout, func() bool {
		if pids, err = cgroup.Procs(dir); err != nil || len(pids) == 0 {
			return true
		}
		for _, pid := range pids {
			fd, err := unix.PidfdOpen(pid, 0)
			if err != nil {
				continue
			}
			_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
			unix.Close(fd)
		}
		return false
	})
	if err != nil {
		return err
	}
	if !emptied {
		return fmt.Errorf("v1 cgroup %s still lists %v after SIGKILL", dir, pids)
	}
	return removeTree(dir)
}

// StartIn starts argv and then moves it into the cgroup at dir (a v2 or v1
// cgroup: its cgroup.procs), as an exec system starts a job's task in a
// cgroup the agent does not own. A t.Cleanup kills and reaps it. Call it
// from the test goroutine.
func StartIn(t testing.TB, dir string, argv ...string) *exec.Cmd {
	t.Helper()
	cmd, _ := StartWatched(t, dir, argv...)
	return cmd
}

// StartWatched is StartIn that also returns a channel closed once the
// process is reaped, for a test that ends the process itself and waits for
// its end (the process is reaped by StartWatched: never call cmd.Wait).
func StartWatched(t testing.TB, dir string, argv ...string) (*exec.Cmd, <-chan struct{}) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	return cmd, done
}
