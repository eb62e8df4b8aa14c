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

// WallRecheck is how often a timer armed for a wall-clock instant (At)
// looks at the wall clock again.
const WallRecheck = time.Second

// At calls f, in its own goroutine as AfterFunc does, once c.Now() reads t
// or later: t is an instant of the wall clock (a job's expiration E, its
// deadline D), agreed with other hosts.
//
// Timers run on the monotonic clock, which a step of the wall clock (NTP,
// an administrator's date) does not move: a timer of t.Sub(now) fires early
// by the size of a backward step and late by that of a forward one. At
// wakes at the earlier of the monotonic estimate and every WallRecheck,
// compares the wall clock (monotonic readings stripped) with t, and fires
// only once it is reached: never early, and at most WallRecheck late after
// a forward step.
//
// A clock with an At method of its own (Real: a CLOCK_REALTIME timerfd,
// which the kernel fires at the wall-clock instant across steps, without
// waking before) is asked instead.
func At(c Clock, t time.Time, f func()) Timer {
	if wc, ok := c.(interface {
		At(time.Time, func()) (Timer, error)
	}); ok {
		if tm, err := wc.At(t, f); err == nil {
			return tm
		}
	}
	w := &wallTimer{c: c, t: t.Round(0), f: f}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.arm()
	return w
}

type wallTimer struct {
	mu      sync.Mutex
	c       Clock
	t       time.Time
	f       func()
	cur     Timer
	stopped bool
}

// arm schedules the next look at the wall clock; w.mu is held.
func (w *wallTimer) arm() {
	d := min(w.t.Sub(w.c.Now().Round(0)), WallRecheck)
	w.cur = w.c.AfterFunc(d, w.wake)
}

func (w *wallTimer) wake() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	if w.c.Now().Round(0).Before(w.t) {
		w.arm()
		w.mu.Unlock()
		return
	}
	w.stopped = true
	w.mu.Unlock()
	w.f()
}

func (w *wallTimer) Stop() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return false
	}
	w.stopped = true
	w.cur.Stop()
	return true
}

// Fake is a manually stepped clock for tests. Callbacks of timers that fall due
// during Advance or Set run synchronously, in deadline order, on the caller's
// goroutine, after the fake's lock is released.
//
// It models the two clocks of a host: timers run on the monotonic one,
// which Advance and Set move, and Now reads the wall clock, which moves
// with it and which StepWall alone steps (as NTP or date(1) would), so
// tests can check what a timer does when the two disagree.
type Fake struct {
	mu     sync.Mutex
	mono   time.Time     // the monotonic clock, on which timers are due
	off    time.Duration // wall clock minus monotonic clock
	seq    int
	timers []*fakeTimer
}

var _ Clock = (*Fake)(nil)

// NewFake returns a fake clock reading t.
func NewFake(t time.Time) *Fake { return &Fake{mono: t} }

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

// Now returns the fake wall-clock time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mono.Add(f.off)
}

// StepWall steps the wall clock by d (negative: backwards) without moving
// the monotonic clock: no timer falls due, but Now reads d further.
func (f *Fake) StepWall(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.off += d
}

// AfterFunc schedules fn d from now on the monotonic clock. A non-positive
// d is due at the next Advance (even by zero).
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	t := &fakeTimer{f: f, when: f.mono.Add(d), seq: f.seq, fn: fn}
	f.timers = append(f.timers, t)
	return t
}

// Pending returns how many timers are scheduled.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// Advance moves both clocks forward by d, running every timer that falls
// due.
func (f *Fake) Advance(d time.Duration) { f.Set(f.Now().Add(d)) }

// Set moves both clocks forward until the wall clock reads t (never
// backwards), running every timer due by then. Timers scheduled by those
// callbacks also run if they are due by then.
func (f *Fake) Set(wall time.Time) {
	f.mu.Lock()
	t := wall.Add(-f.off)
	f.mu.Unlock()
	for {
		f.mu.Lock()
		sort.SliceStable(f.timers, func(i, j int) bool {
			if f.timers[i].when.Equal(f.timers[j].when) {
				return f.timers[i].seq < f.timers[j].seq
			}
			return f.timers[i].when.Before(f.timers[j].when)
		})
		if len(f.timers) == 0 || f.timers[0].when.After(t) {
			if t.After(f.mono) {
				f.mono = t
			}
			f.mu.Unlock()
			return
		}
		next := f.timers[0]
		f.timers = f.timers[1:]
		next.stopped = true
		if next.when.After(f.mono) {
			f.mono = next.when
		}
		f.mu.Unlock()
		next.fn()
	}
}
