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

// A Budget allows n events per key and interval, reports what it held back
// with the key's next allowed event, and keeps each key apart.
func TestBudget(t *testing.T) {
	b := NewBudget(3, time.Minute, 100)
	t0 := time.Unix(1000, 0)
	allowed := 0
	for i := range 50 {
		if ok, n := b.Allow("a", t0.Add(time.Duration(i)*time.Second)); ok {
			allowed++
			if n != 0 {
				t.Errorf("event %d: %d suppressed reported within the first interval", i, n)
			}
		}
	}
	if allowed != 3 {
		t.Errorf("%d of 50 events in one interval allowed, want 3", allowed)
	}
	if ok, _ := b.Allow("b", t0.Add(30*time.Second)); !ok {
		t.Error("b held back by a's budget")
	}
	// a's interval began at t0: the next begins at its first event a
	// minute or more later.
	if ok, n := b.Allow("a", t0.Add(time.Minute)); !ok || n != 47 {
		t.Errorf("a after its interval: %v, %d suppressed; want true, 47", ok, n)
	}
	if ok, n := b.Allow("a", t0.Add(time.Minute+time.Second)); !ok || n != 0 {
		t.Errorf("a's second event of the new interval: %v, %d; want true, 0", ok, n)
	}
}

// A flood of distinct keys does not grow a Budget past its bound, and the
// keys whose interval is over go first.
func TestBudgetKeysBounded(t *testing.T) {
	const maxKeys = 64
	b := NewBudget(2, time.Minute, maxKeys)
	t0 := time.Unix(1000, 0)
	for i := range 10 * maxKeys {
		b.Allow(fmt.Sprint("k", i), t0.Add(time.Duration(i)*time.Millisecond))
		if k := b.Keys(); k > maxKeys {
			t.Fatalf("%d keys kept after %d distinct ones, at most %d", k, i+1, maxKeys)
		}
	}
	// A key that is still within its interval and spent keeps its
	// budget while the expired ones are forgotten around it.
	b = NewBudget(1, time.Minute, 4)
	b.Allow("busy", t0.Add(50*time.Second))
	for i := range 3 {
		b.Allow(fmt.Sprint("old", i), t0)
	}
	b.Allow("new", t0.Add(70*time.Second)) // the table is full: the old ones go
	if ok, _ := b.Allow("busy", t0.Add(71*time.Second)); ok {
		t.Error("busy's spent budget was forgotten with the expired keys")
	}
	if k := b.Keys(); k != 2 {
		t.Errorf("%d keys kept, want busy and new", k)
	}
}

// A clock stepped back starts a key's interval again.
func TestBudgetClockStepBack(t *testing.T) {
	b := NewBudget(1, time.Minute, 8)
	t0 := time.Unix(1000, 0)
	b.Allow("a", t0)
	if ok, _ := b.Allow("a", t0.Add(-time.Hour)); !ok {
		t.Error("after a step back of an hour, a is still held back")
	}
}
