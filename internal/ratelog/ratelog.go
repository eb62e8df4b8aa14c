// Package ratelog bounds the log lines that input from outside can cause:
// a refused packet, message or request is logged once per key (a claimed
// sender, a remote address) and interval, and at most Burst lines per
// interval in all, whatever the number of keys; what was held back is
// counted and reported with the next line allowed.
package ratelog

import (
	"sync"
	"time"
)

// Burst bounds the events one Limiter allows per interval, all keys
// together.
const Burst = 20

// MaxKeys bounds the keys a Limiter remembers: a flood of distinct keys
// resets its table rather than growing it (the Burst still holds).
const MaxKeys = 1024

// Limiter allows one event per key per interval and Burst events per
// interval in all. The zero value is not usable: use New. Its methods are
// safe for concurrent use and never block on anything but its own mutex.
type Limiter struct {
	every time.Duration
	mu    sync.Mutex
	seen  map[string]*entry

	windowStart time.Time
	inWindow    int // events allowed since windowStart
	overflow    int // events suppressed by the cap, not yet reported
}

type entry struct {
	last       time.Time
	suppressed int
}

// New returns a Limiter with the given interval.
func New(every time.Duration) *Limiter {
	return &Limiter{every: every, seen: make(map[string]*entry)}
}

// Allow reports whether an event for key may be logged at now, and how many
// events were held back since the last one that was (of this key, and
// those the overall cap held back).
func (l *Limiter) Allow(key string, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil || len(l.seen) >= MaxKeys {
		l.seen = make(map[string]*entry)
	}
	if now.Sub(l.windowStart) >= l.every || now.Before(l.windowStart) {
		l.windowStart, l.inWindow = now, 0
	}
	e := l.seen[key]
	if e != nil && now.Sub(e.last) < l.every && !now.Before(e.last) {
		e.suppressed++
		return false, 0
	}
	if l.inWindow >= Burst {
		l.overflow++
		return false, 0
	}
	l.inWindow++
	n := l.overflow
	l.overflow = 0
	if e == nil {
		l.seen[key] = &entry{last: now}
		return true, n
	}
	n += e.suppressed
	e.last, e.suppressed = now, 0
	return true, n
}

// Keys returns how many keys l remembers (tests).
func (l *Limiter) Keys() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen)
}
