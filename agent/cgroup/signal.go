package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Signal sends sig to every process of the cgroup at path and its
// descendants (Procs), and returns how many got it. path may be a foreign
// cgroup below Mount: whether to signal those is the caller's policy. It
// refuses the hierarchy root and any cgroup that holds the agent.
//
// It is safe against pid reuse: each pid is pinned with pidfd_open, then
// ProcRoot/<pid>/cgroup is checked to still be path or below, then the signal
// goes through the pidfd (if the pinned process died meanwhile, the send
// fails with ESRCH and the file read may have described another process, but
// nothing is signalled). Processes that exit on the way (ESRCH) are skipped,
// not errors. Processes forked during the call may be missed: call again on
// the next cgroup.events change. Safe for concurrent use; it blocks for one
// /proc read per process.
func (m *Manager) Signal(path string, sig syscall.Signal) (int, error) {
	p, err := m.below("signal", path)
	if err != nil {
		return 0, err
	}
	if err := m.refuseSelf("signal", p); err != nil {
		return 0, err
	}
	pids, err := m.signalAll(p, sig)
	return len(pids), err
}

// Kill kills every process of the owned cgroup at path and its descendants:
// it writes "1" to path/cgroup.kill when Features().Kill (which also catches
// processes forking meanwhile), then sends SIGKILL to every pid still listed,
// as Signal does, because on Linux 6.18 cgroup.kill misses a process whose
// main thread has exited while another thread lives on. It returns how many
// processes it signalled: those listed when it began (all hit by
// cgroup.kill) plus any its own pass reached. A cgroup that does not exist
// has nothing to kill (0, nil).
//
// Kill does not wait: the cgroup is empty only when its cgroup.events says
// "populated 0" (see Watch). It refuses paths outside Root, Root itself, and
// a cgroup holding the agent, with an error wrapping ErrNotOwned that names
// the path. Safe for concurrent use.
func (m *Manager) Kill(path string) (int, error) {
	p, err := m.owned("kill", path)
	if err != nil {
		return 0, err
	}
	var errs []error
	killed := make(map[int]bool)
	if m.feat.Kill {
		before, err := Procs(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("kill cgroup %s: %w", p, err))
		}
		err = writeCgroupFile(filepath.Join(p, "cgroup.kill"), "1")
		switch {
		case vanished(err):
			return 0, nil
		case err != nil:
			errs = append(errs, fmt.Errorf("kill cgroup %s: write cgroup.kill: %w", p, err))
		default:
			for _, pid := range before {
				killed[pid] = true
			}
		}
	}
	signalled, err := m.signalAll(p, unix.SIGKILL)
	if err != nil {
		errs = append(errs, err)
	}
	for _, pid := range signalled {
		killed[pid] = true
	}
	m.log.Debug("killed cgroup", "cgroup", p, "processes", len(killed), "signalled_by_pid", len(signalled))
	return len(killed), errors.Join(errs...)
}

// Remove removes the owned cgroup at path and every cgroup below it,
// deepest first. A cgroup that is already gone is fine. A populated cgroup
// cannot be removed: the error wraps EBUSY and names that cgroup. It refuses
// paths outside Root and Root itself (ErrNotOwned). Safe for concurrent use.
func (m *Manager) Remove(path string) error {
	p, err := m.owned("remove", path)
	if err != nil {
		return err
	}
	var dirs []string
	err = filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
		if err != nil {
			if vanished(err) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, q)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("remove cgroup %s: %w", p, err)
	}
	// WalkDir lists parents before their children.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := unix.Rmdir(dirs[i]); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove cgroup %s: %w", dirs[i], err)
		}
	}
	return nil
}

// signalAll signals every listed process of p's subtree and returns the
// pids that got the signal. See Signal.
func (m *Manager) signalAll(p string, sig syscall.Signal) ([]int, error) {
	pids, err := Procs(p)
	if err != nil {
		return nil, fmt.Errorf("signal %s to cgroup %s: %w", unix.SignalName(sig), p, err)
	}
	var sent []int
	var errs []error
	for _, pid := range pids {
		ok, err := m.signalPID(pid, p, sig)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			sent = append(sent, pid)
		}
	}
	return sent, errors.Join(errs...)
}

// signalPID sends sig to pid if it is still in p's subtree. It reports
// whether the signal was sent; a process that is gone is (false, nil).
func (m *Manager) signalPID(pid int, p string, sig syscall.Signal) (bool, error) {
	if pid == os.Getpid() {
		return false, nil
	}
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	case errors.Is(err, unix.ESRCH):
		return false, nil
	case errors.Is(err, unix.ENOSYS):
		return m.signalPIDNoPidfd(pid, p, sig)
	case err != nil:
		return false, fmt.Errorf("signal pid %d of cgroup %s: pidfd_open: %w", pid, p, err)
	}
	defer unix.Close(fd)
	in, err := m.pidIn(pid, p)
	if err != nil || !in {
		return false, err
	}
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return false, nil
		}
		return false, fmt.Errorf("signal %s to pid %d of cgroup %s: %w", unix.SignalName(sig), pid, p, err)
	}
	return true, nil
}

// signalPIDNoPidfd is the fallback for kernels before 5.3 (no pidfd_open):
// check, then kill(2). A pid reused between the two could get the signal;
// the window is a /proc read long.
func (m *Manager) signalPIDNoPidfd(pid int, p string, sig syscall.Signal) (bool, error) {
	in, err := m.pidIn(pid, p)
	if err != nil || !in {
		return false, err
	}
	if err := unix.Kill(pid, sig); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return false, nil
		}
		return false, fmt.Errorf("signal %s to pid %d of cgroup %s: %w", unix.SignalName(sig), pid, p, err)
	}
	return true, nil
}

// pidIn reports whether pid's cgroup (v2, or the v1 hierarchy p lies in)
// is p or below. A process that is gone is (false, nil).
func (m *Manager) pidIn(pid int, p string) (bool, error) {
	if v, ok := m.v1Of(p); ok && !within(p, m.mount) {
		return m.pidInV1(pid, p, v)
	}
	own, err := m.pidCgroup(strconv.Itoa(pid))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			return false, nil
		}
		return false, fmt.Errorf("signal pid %d of cgroup %s: %w", pid, p, err)
	}
	if !within(filepath.Join(m.mount, own), p) {
		m.log.Debug("pid left the cgroup before the signal", "pid", pid, "cgroup", p, "now", own)
		return false, nil
	}
	return true, nil
}

// pidInV1 is pidIn for a cgroup of the v1 hierarchy v: the line of
// /proc/PID/cgroup that names v's controllers.
func (m *Manager) pidInV1(pid int, p string, v V1Mount) (bool, error) {
	file := filepath.Join(m.procRoot, strconv.Itoa(pid), "cgroup")
	data, err := os.ReadFile(file)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			return false, nil
		}
		return false, fmt.Errorf("signal pid %d of cgroup %s: %w", pid, p, err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !sameControllers(parts[1], v.Controllers) {
			continue
		}
		if within(filepath.Join(v.Mountpoint, parts[2]), p) {
			return true, nil
		}
		m.log.Debug("pid left the cgroup before the signal", "pid", pid, "cgroup", p, "now", parts[2])
		return false, nil
	}
	return false, nil
}
