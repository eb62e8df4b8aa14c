// Package clock is the time seam of gracewatch: every deadline and timer goes
// through a Clock so that tests step a fake one instead of sleeping.
package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock tells the time and schedules callbacks. Implementations are safe for
// concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has elapsed. f must not
	// assume it runs on any particular goroutine.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a scheduled callback.
type Timer interface {
	// Stop prevents the callback from running; it reports whether it did.
	Stop() bool
}

// Real is the wall clock.
type Real struct{}

var _ Clock = Real{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// AfterFunc wraps time.AfterFunc.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Fake is a manually stepped clock for tests. Callbacks of timers that fall due
// during Advance or Set run synchronously, in deadline order, on the caller's
// goroutine, after the fake's lock is released.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	seq    int
	timers []*fakeTimer
}

var _ Clock = (*Fake)(nil)

// NewFake returns a fake clock reading t.
func NewFake(t time.Time) *Fake { return &Fake{now: t} }

type fakeTimer struct {
	f       *Fake
	when    time.Time
	seq     int
	fn      func()
	stopped bool
}

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	if t.stopped {
		return false
	}
	t.stopped = true
	for i, x := range t.f.timers {
		if x == t {
			t.f.timers = append(t.f.timers[:i], t.f.timers[i+1:]...)
			break
		}
	}
	return true
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// AfterFunc schedules fn at Now()+d. A non-positive d is due at the next
// Advance (even by zero).
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	t := &fakeTimer{f: f, when: f.now.Add(d), seq: f.seq, fn: fn}
	f.timers = append(f.timers, t)
	return t
}

// Pending returns how many timers are scheduled.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// Advance moves the clock forward by d, running every timer that falls due.
func (f *Fake) Advance(d time.Duration) { f.Set(f.Now().Add(d)) }

// Set moves the clock to t (never backwards), running every timer due by t.
// Timers scheduled by those callbacks also run if they are due by t.
func (f *Fake) Set(t time.Time) {
	for {
		f.mu.Lock()
		sort.SliceStable(f.timers, func(i, j int) bool {
			if f.timers[i].when.Equal(f.timers[j].when) {
				return f.timers[i].seq < f.timers[j].seq
			}
			return f.timers[i].when.Before(f.timers[j].when)
		})
		if len(f.timers) == 0 || f.timers[0].when.After(t) {
			if t.After(f.now) {
				f.now = t
			}
			f.mu.Unlock()
			return
		}
		next := f.timers[0]
		f.timers = f.timers[1:]
		next.stopped = true
		if next.when.After(f.now) {
			f.now = next.when
		}
		f.mu.Unlock()
		next.fn()
	}
}
