package testutil

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// Freeze returns only once the process is stopped; a continued one is not.
func TestFreeze(t *testing.T) {
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	if allStopped(pid) {
		t.Fatal("a busy process reads as stopped")
	}
	Freeze(t, pid)
	if !allStopped(pid) {
		t.Fatal("Freeze returned before the process stopped")
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if !Poll(20*time.Second, func() bool { return !allStopped(pid) }) {
		t.Fatal("a continued process still reads as stopped")
	}
}
