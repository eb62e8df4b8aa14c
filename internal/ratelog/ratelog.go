// Package ratelog bounds the log lines that input from outside can cause:
// a refused packet, message or request is logged once per key (a claimed
// sender, a remote address) and interval, and at most Burst lines per
// interval in all, whatever the number of keys; what was held back is
// counted and reported with the next line allowed. A Budget allows a few
// lines per key (a node) and interval, whatever kind of line they are.
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

// Budget allows n events per key and interval: the lines one node's input
// can cause, however many kinds of line they are (a Limiter's one per key
// would need a key per kind). Each key's interval starts with its first
// event after the last one ended; what the key's budget held back is
// counted and reported with its next event allowed. There is no cap over
// all keys: a storm of many keys is many nodes, each with its own lines
// to tell. Its methods are safe for concurrent use and never block on
// anything but its own mutex.
type Budget struct {
	every   time.Duration
	n       int
	maxKeys int
	mu      sync.Mutex
	keys    map[string]*budgetEntry
}

type budgetEntry struct {
	start      time.Time // of the key's current interval
	used       int       // events allowed in it
	suppressed int       // events held back, not yet reported
}

// NewBudget returns a Budget of n events per key and interval every that
// remembers at most maxKeys keys: past them the keys whose interval has
// ended are forgotten, and, when that frees less than a quarter of the
// table, every key (their budgets start again: a flood of distinct keys
// costs memory only up to maxKeys, and the table's upkeep stays
// amortised O(1) per event). A forgotten key's held-back count is not
// reported with its next line: callers count each event held back as it
// is.
func NewBudget(n int, every time.Duration, maxKeys int) *Budget {
	return &Budget{every: every, n: max(n, 1), maxKeys: max(maxKeys, 1), keys: make(map[string]*budgetEntry)}
}

// Allow reports whether an event for key may be logged at now, and how many
// events of key were held back since the last one that was.
func (b *Budget) Allow(key string, now time.Time) (bool, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.keys[key]
	if e == nil {
		if len(b.keys) >= b.maxKeys {
			b.evictLocked(now)
		}
		e = &budgetEntry{start: now}
		b.keys[key] = e
	}
	if now.Sub(e.start) >= b.every || now.Before(e.start) {
		// A new interval (or the clock stepped back: not held back for
		// the length of the step).
		e.start, e.used = now, 0
	}
	if e.used >= b.n {
		e.suppressed++
		return false, 0
	}
	e.used++
	n := e.suppressed
	e.suppressed = 0
	return true, n
}

// evictLocked forgets the keys whose interval ended before now, or every
// key when that frees less than a quarter of the table; b.mu is held.
func (b *Budget) evictLocked(now time.Time) {
	before := len(b.keys)
	for k, e := range b.keys {
		if now.Sub(e.start) >= b.every || now.Before(e.start) {
			delete(b.keys, k)
		}
	}
	if before-len(b.keys) < before/4 {
		clear(b.keys)
	}
}

// Keys returns how many keys b remembers (tests).
func (b *Budget) Keys() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.keys)
}
