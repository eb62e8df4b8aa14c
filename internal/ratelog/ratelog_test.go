package ratelog

import (
	"fmt"
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	l := New(10 * time.Second)
	t0 := time.Unix(1000, 0)
	if ok, _ := l.Allow("a", t0); !ok {
		t.Error("first a")
	}
	if ok, _ := l.Allow("b", t0); !ok {
		t.Error("first b: limits are per key")
	}
	for range 3 {
		if ok, _ := l.Allow("a", t0.Add(time.Second)); ok {
			t.Error("a within the interval")
		}
	}
	if ok, n := l.Allow("a", t0.Add(11*time.Second)); !ok || n != 3 {
		t.Errorf("a after the interval: %v, %d suppressed; want true, 3", ok, n)
	}
	for i := range MaxKeys + 5 {
		l.Allow(string(rune('A'+i)), t0.Add(time.Duration(i)*time.Hour))
	}
	if k := l.Keys(); k > MaxKeys {
		t.Errorf("%d keys kept, at most %d", k, MaxKeys)
	}
}

// A flood of distinct keys is capped too, and what the cap suppressed is
// reported with the next line allowed.
func TestLimiterBurst(t *testing.T) {
	l := New(10 * time.Second)
	t0 := time.Unix(1000, 0)
	allowed := 0
	for i := range 1000 {
		if ok, _ := l.Allow(fmt.Sprint("k", i), t0.Add(time.Duration(i)*time.Millisecond)); ok {
			allowed++
		}
	}
	if allowed != Burst {
		t.Fatalf("%d of 1,000 distinct keys allowed in one interval, want %d", allowed, Burst)
	}
	ok, n := l.Allow("late", t0.Add(11*time.Second))
	if !ok || n != 1000-Burst {
		t.Errorf("next interval: %v, %d suppressed reported; want true, %d", ok, n, 1000-Burst)
	}
}

// A clock stepped back does not silence a key for the length of the step.
func TestLimiterClockStepBack(t *testing.T) {
	l := New(10 * time.Second)
	t0 := time.Unix(1000, 0)
	l.Allow("a", t0)
	if ok, _ := l.Allow("a", t0.Add(-time.Hour)); !ok {
		t.Error("after a step back of an hour, a is still held back")
	}
}
