package cgroup

import (
	"os"
	"syscall"
)

// InotifyFD exposes the watcher's inotify descriptor, so tests can read its
// /proc/self/fdinfo entry (the live watches).
func (m *Manager) InotifyFD() int { return m.w.fd }

// SignalPID exposes the per-pid step of Signal (pidfd, cgroup check, send).
func (m *Manager) SignalPID(pid int, path string, sig syscall.Signal) (bool, error) {
	return m.signalPID(pid, path, sig)
}

// ReadKVFrom exposes ReadKV's read of a cgroup file opened before (so a
// test can remove the cgroup between the open and the read).
func ReadKVFrom(f *os.File) (map[string]string, error) { return readKV(f) }
