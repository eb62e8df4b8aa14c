package cgroup

import "syscall"

// InotifyFD exposes the watcher's inotify descriptor, so tests can read its
// /proc/self/fdinfo entry (the live watches).
func (m *Manager) InotifyFD() int { return m.w.fd }

// SignalPID exposes the per-pid step of Signal (pidfd, cgroup check, send).
func (m *Manager) SignalPID(pid int, path string, sig syscall.Signal) (bool, error) {
	return m.signalPID(pid, path, sig)
}
