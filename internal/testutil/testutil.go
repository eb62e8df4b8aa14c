// Package testutil holds helpers shared by gracewatch's tests.
package testutil

import (
	"bytes"
	"os"
	"sync"
	"testing"
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
// logger that a test reads while the code under test writes.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
