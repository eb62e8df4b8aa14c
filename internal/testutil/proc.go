package testutil

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Freeze sends SIGSTOP to pid and waits until every thread of it is stopped
// (state T in /proc). kill(2) returns once the signal is queued: a thread
// running on another CPU, or one the kernel has not scheduled yet, stops
// a moment later, and on a loaded machine it may first handle what
// already reached it. A test that needs the process to miss what comes
// next waits for the stop itself.
func Freeze(t testing.TB, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %d: %v", pid, err)
	}
	Eventually(t, time.Minute, fmt.Sprintf("every thread of process %d stopped", pid), func() bool {
		return allStopped(pid)
	})
}

// allStopped reports whether every thread of pid is stopped (T, or t when
// traced).
func allStopped(pid int) bool {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			return false // a thread that ended: read again
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
			return false
		}
	}
	return true
}
