package testutil

import (
	"fmt"
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	n := 0
	if !Poll(time.Second, func() bool { n++; return n == 3 }) || n != 3 {
		t.Fatalf("Poll stopped after %d calls, want 3", n)
	}
	start := time.Now()
	calls := 0
	if Poll(50*time.Millisecond, func() bool { calls++; return false }) {
		t.Fatal("Poll of a condition that never holds returned true")
	}
	// At least its timeout; the upper bound only catches a Poll that
	// ignores it (a loaded machine may deschedule the poller for long).
	if d := time.Since(start); d < 50*time.Millisecond || d > 10*time.Second {
		t.Errorf("Poll of a false condition took %v, want its 50 ms timeout", d)
	}
	// 1, 2, 4, 8, 16, 32 ms... and the last call after the deadline: a
	// handful of calls, not one a millisecond. (At least the first and the
	// last: a descheduled poller may make no other.)
	if calls < 2 || calls > 12 {
		t.Errorf("Poll called the condition %d times in 50 ms", calls)
	}
	// Called once more after the deadline.
	var at time.Time
	deadline := time.Now().Add(20 * time.Millisecond)
	if !Poll(20*time.Millisecond, func() bool { at = time.Now(); return at.After(deadline) }) {
		t.Errorf("Poll did not look again after its deadline")
	}
}

func TestEventually(t *testing.T) {
	flag := make(chan struct{})
	// Not a wait: the condition holds 20 ms in, what Eventually is timed against.
	go func() { time.Sleep(20 * time.Millisecond); close(flag) }()
	d := Eventually(t, 5*time.Second, "the flag", func() bool {
		select {
		case <-flag:
			return true
		default:
			return false
		}
	})
	if d < 15*time.Millisecond || d > 5*time.Second {
		t.Errorf("Eventually took %v for a condition that holds after 20 ms", d)
	}
}

// fatalRecorder records Fatalf instead of ending the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}
func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
}

func TestEventuallyFails(t *testing.T) {
	r := &fatalRecorder{TB: t}
	Eventually(r, 10*time.Millisecond, "a condition that never holds", func() bool { return false })
	if want := "timed out after 10ms waiting for a condition that never holds"; r.msg != want {
		t.Errorf("Fatalf(%q), want %q", r.msg, want)
	}
}

func TestPollRead(t *testing.T) {
	// Errors and refused values are read past; the first accepted value is
	// returned.
	n := 0
	v, err, ok := PollRead(time.Second, func() (int, error) {
		n++
		if n == 1 {
			return 0, fmt.Errorf("not yet")
		}
		return n, nil
	}, func(v int) bool { return v >= 3 })
	if !ok || err != nil || v != 3 {
		t.Fatalf("PollRead = %d, %v, %v; want 3, nil, true", v, err, ok)
	}
	// When nothing holds, the last value and error read come back.
	n = 0
	v, err, ok = PollRead(20*time.Millisecond, func() (int, error) {
		n++
		return n, fmt.Errorf("read %d failed", n)
	}, func(int) bool { return true })
	if ok || v != n || err == nil || err.Error() != fmt.Sprintf("read %d failed", n) {
		t.Fatalf("PollRead of a failing read = %d, %v, %v; want %d, its last error, false", v, err, ok, n)
	}
}

func TestSyncBufferMax(t *testing.T) {
	b := &SyncBuffer{Max: 8}
	for _, w := range []string{"12345", "6789", "abc"} {
		if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", w, n, err)
		}
	}
	// The write that reached the bound is kept; what follows is dropped.
	if got := b.String(); got != "123456789" {
		t.Errorf("SyncBuffer{Max: 8} holds %q, want %q", got, "123456789")
	}
	u := &SyncBuffer{}
	u.Write([]byte("12345"))
	u.Write([]byte("6789"))
	if got := u.String(); got != "123456789" {
		t.Errorf("SyncBuffer{} holds %q", got)
	}
}

func TestClosed(t *testing.T) {
	ch := make(chan struct{})
	if Closed(ch) {
		t.Fatal("an open channel is Closed")
	}
	close(ch)
	if !Closed(ch) {
		t.Fatal("a closed channel is not Closed")
	}
}

func TestHasLine(t *testing.T) {
	var b SyncBuffer
	b.Write([]byte("level=INFO msg=ready node=n1\nlevel=WARN msg=slow node=n2\n"))
	if !b.HasLine("msg=slow", "node=n2") || !b.HasLine() {
		t.Error("a line holding every word not found")
	}
	if b.HasLine("msg=slow", "node=n1") {
		t.Error("words of two lines found as one line")
	}
}
