package watch

// The view's changes as events, their history for a watcher that resumes
// (Last-Event-ID), and the watchers' subscriptions (GET /v1/watch).

import (
	"sync"
	"sync/atomic"

	"github.com/gracewatch/gracewatch/aggregator/view"
)

// Event is one change of a node's served state (any field of its summary).
type Event struct {
	// ID is "<epoch>-<seq>": seq counts this process's events from 1, and
	// epoch is random per process, so that an id given to another
	// aggregator, or to this one after a restart, is recognised as foreign
	// (and answered with a snapshot) instead of silently skipping events.
	ID   string
	Seq  uint64
	Node view.Node
	// Forgotten: the node Node.Name left the view (Service.Forget); the
	// watch sends a "forget" event.
	Forgotten bool
}

// Subscription is one watcher of the view's changes (GET /v1/watch).
// Between the snapshot or missed events it starts from and the events on C
// there is no gap and no overlap.
type Subscription struct {
	// Snapshot is non-nil (possibly empty) when the watcher starts from the
	// whole view: it gave no Last-Event-ID, or one that is foreign (another
	// aggregator's, or this one's before a restart) or older than the
	// history. The nodes are summaries, sorted by name.
	Snapshot []view.Node
	// SnapshotID is the id of the last event the snapshot includes.
	SnapshotID string
	// Missed are the events after the given Last-Event-ID, when the
	// history still holds all of them.
	Missed []Event
	// C delivers the following events. It is closed when the watcher fell
	// more than Options.SubscriberBuffer events behind (Dropped then
	// reports true) or the Service stopped.
	C <-chan Event

	ch      chan Event
	dropped atomic.Bool
	// owner is the lock of the Service that publishes to the watcher;
	// closed and remove are under it.
	owner  sync.Locker
	closed bool
	remove func(*Subscription)
}

// NewSubscription returns a subscription whose C holds buffer events. Its
// owner publishes under the lock owner; Close calls remove (under it) to
// have the owner forget the subscription.
func NewSubscription(buffer int, owner sync.Locker, remove func(*Subscription)) *Subscription {
	sub := &Subscription{ch: make(chan Event, buffer), owner: owner, remove: remove}
	sub.C = sub.ch
	return sub
}

// Offer hands ev to the watcher without blocking; false, and Dropped from
// then on, when the watcher has fallen a whole buffer behind. The owner's
// lock is held.
func (sub *Subscription) Offer(ev Event) bool {
	select {
	case sub.ch <- ev:
		return true
	default:
		sub.dropped.Store(true)
		return false
	}
}

// EndLocked ends the subscription from the owner's side (the owner's lock
// is held): C is closed, and the owner forgets it. It may be called more
// than once.
func (sub *Subscription) EndLocked() {
	if !sub.closed {
		sub.closed = true
		sub.remove(sub)
		close(sub.ch)
	}
}

// Close ends the subscription. It may be called more than once.
func (sub *Subscription) Close() {
	sub.owner.Lock()
	defer sub.owner.Unlock()
	sub.EndLocked()
}

// Dropped reports whether the Service dropped the watcher for falling
// behind.
func (sub *Subscription) Dropped() bool { return sub.dropped.Load() }

// EventLog is the history of events kept for Last-Event-ID resumption: at
// most max events holding at most maxBytes (by eventSize), the oldest
// dropped first. Not safe for concurrent use (the Service's mu guards it).
type EventLog struct {
	ring          []Event // len max; the oldest kept is at start
	start, n      int
	bytes         int
	max, maxBytes int
}

func NewEventLog(max, maxBytes int) EventLog {
	return EventLog{ring: make([]Event, max), max: max, maxBytes: maxBytes}
}

// Add appends ev, whose Seq follows the last one added.
func (l *EventLog) Add(ev Event) {
	size := eventSize(ev)
	for l.n > 0 && (l.n == l.max || l.bytes+size > l.maxBytes) {
		l.bytes -= eventSize(l.ring[l.start])
		l.ring[l.start] = Event{} // let the collector have it
		l.start = (l.start + 1) % l.max
		l.n--
	}
	l.ring[(l.start+l.n)%l.max] = ev
	l.n++
	l.bytes += size
}

// Since returns the events after seq after, last being the seq of the last
// event added; ok is false when the log no longer holds all of them (or
// after is from the future).
func (l *EventLog) Since(after, last uint64) ([]Event, bool) {
	if after > last || last-after > uint64(l.n) {
		return nil, false
	}
	k := int(last - after)
	out := make([]Event, 0, k)
	for i := l.n - k; i < l.n; i++ {
		out = append(out, l.ring[(l.start+i)%l.max])
	}
	return out, true
}

// eventSize estimates the bytes an event keeps alive: its strings and a
// fixed cost per struct. It need not be exact, only grow with what a node
// can make it hold.
func eventSize(ev Event) int {
	n := ev.Node
	size := 256 + len(ev.ID) + len(n.Name) + len(n.Reason) + len(n.DecodeError) + len(n.Role) + len(n.Member)
	for _, td := range n.Teardowns {
		size += 96 + len(td.Job) + len(td.Phase) + len(td.Outcome)
	}
	if r := n.LastReport; r != nil {
		size += 96 + len(r.Job) + len(r.Stage) + len(r.Outcome) + len(r.Summary) + len(r.Detail)
	}
	return size
}
