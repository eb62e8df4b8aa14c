package clock

import (
	"testing"
	"time"
)

func TestFakeRunsTimersInOrder(t *testing.T) {
	f := NewFake(time.Unix(1000, 0))
	var got []int
	f.AfterFunc(3*time.Second, func() { got = append(got, 3) })
	f.AfterFunc(1*time.Second, func() {
		got = append(got, 1)
		f.AfterFunc(time.Second, func() { got = append(got, 2) })
	})
	stopped := f.AfterFunc(2500*time.Millisecond, func() { got = append(got, 99) })
	if !stopped.Stop() {
		t.Fatal("Stop of a pending timer returned false")
	}
	f.Advance(2 * time.Second)
	if len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("after 2s got %v, want [1 2]", got)
	}
	f.Advance(time.Second)
	if len(got) != 3 || got[2] != 3 {
		t.Fatalf("after 3s got %v, want [1 2 3]", got)
	}
	if f.Now() != time.Unix(1003, 0) {
		t.Fatalf("now = %v", f.Now())
	}
	if f.Pending() != 0 {
		t.Fatalf("pending = %d", f.Pending())
	}
}

// TestAtFollowsTheWallClock: a timer for a wall-clock instant neither fires
// early after a backward step of the wall clock nor late (beyond
// WallRecheck) after a forward one; AfterFunc, on the monotonic clock,
// ignores both steps.
func TestAtFollowsTheWallClock(t *testing.T) {
	t0 := time.Unix(1000, 0)
	cases := []struct {
		name string
		step time.Duration
		// fires is the monotonic time after which At has fired, at most
		// WallRecheck after the wall clock reached the instant.
		fires time.Duration
	}{
		{"no step", 0, 10 * time.Second},
		{"backward an hour", -time.Hour, 10*time.Second + time.Hour},
		{"forward an hour", time.Hour, 0},
		{"forward 5s", 5 * time.Second, 5 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFake(t0)
			var firedAt time.Time
			var monoFired bool
			At(f, t0.Add(10*time.Second), func() { firedAt = f.Now() })
			f.AfterFunc(10*time.Second, func() { monoFired = true })
			f.StepWall(tc.step)
			// Step the monotonic clock in small steps and look.
			var elapsed time.Duration
			for elapsed = 0; firedAt.IsZero() && elapsed < 3*time.Hour; elapsed += 100 * time.Millisecond {
				f.Advance(100 * time.Millisecond)
				if !firedAt.IsZero() && firedAt.Before(t0.Add(10*time.Second)) {
					t.Fatalf("fired at wall %v, before the instant %v", firedAt, t0.Add(10*time.Second))
				}
			}
			if firedAt.IsZero() {
				t.Fatal("never fired")
			}
			// The wall clock reached the instant at the later of the two.
			reached := t0.Add(10 * time.Second)
			if s := t0.Add(tc.step); s.After(reached) {
				reached = s
			}
			if late := firedAt.Sub(reached); late > WallRecheck {
				t.Fatalf("fired %v after the wall clock reached the instant, want at most %v", late, WallRecheck)
			}
			if elapsed > tc.fires+WallRecheck+100*time.Millisecond {
				t.Fatalf("fired after %v of monotonic time, want about %v", elapsed, tc.fires)
			}
			if elapsed >= 10*time.Second && !monoFired {
				t.Fatal("AfterFunc(10s) did not fire after 10s of monotonic time")
			}
		})
	}
}

func TestAtStop(t *testing.T) {
	f := NewFake(time.Unix(1000, 0))
	fired := false
	tm := At(f, time.Unix(1005, 0), func() { fired = true })
	f.Advance(2 * time.Second)
	if !tm.Stop() || tm.Stop() {
		t.Fatal("Stop: want true, then false")
	}
	f.Advance(time.Hour)
	if fired || f.Pending() != 0 {
		t.Fatalf("fired %v, %d pending after Stop", fired, f.Pending())
	}
}

// TestRealAt: the real clock's wall-clock timer fires at its instant
// (soon here), not before, and a stopped one never does.
func TestRealAt(t *testing.T) {
	fired := make(chan time.Time, 1)
	at := time.Now().Add(200 * time.Millisecond)
	tm := At(Real{}, at, func() { fired <- time.Now() })
	if _, ok := tm.(*realtimeTimer); !ok {
		t.Fatalf("Real's At gave a %T, want the timerfd one", tm)
	}
	select {
	case got := <-fired:
		if got.Before(at) {
			t.Fatalf("fired at %v, before %v", got, at)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("did not fire within 5 s")
	}
	if tm.Stop() {
		t.Fatal("Stop of a fired timer returned true")
	}
	stopped := At(Real{}, time.Now().Add(100*time.Millisecond), func() { fired <- time.Now() })
	if !stopped.Stop() {
		t.Fatal("Stop of a pending timer returned false")
	}
	past := make(chan struct{})
	At(Real{}, time.Now().Add(-time.Hour), func() { close(past) })
	select {
	case <-fired:
		t.Fatal("a stopped timer fired")
	case <-past:
	case <-time.After(5 * time.Second):
		t.Fatal("a timer for a past instant did not fire at once")
	}
}
