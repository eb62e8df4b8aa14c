package aggregator

import (
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/gracewatch/gracewatch/aggregator/view"
)

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
	s       *Service
	dropped atomic.Bool
	closed  bool // under s.mu
}

// Subscribe starts a watcher after lastEventID ("" for a new one). It never
// blocks the Service: a watcher that does not keep up is dropped. Close the
// subscription when done.
func (s *Service) Subscribe(lastEventID string) *Subscription {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub := &Subscription{ch: make(chan Event, s.opts.SubscriberBuffer), s: s}
	sub.C = sub.ch
	missed, ok := []Event(nil), false
	if after, valid := s.parseEventID(lastEventID); valid {
		missed, ok = s.history.since(after, s.seq)
	}
	if ok {
		sub.Missed = missed
	} else {
		sub.Snapshot = make([]view.Node, 0, len(s.names))
		for _, name := range s.names {
			sub.Snapshot = append(sub.Snapshot, s.view[name].Summary())
		}
		sub.SnapshotID = s.eventID(s.seq)
	}
	if s.finished {
		sub.closed = true
		close(sub.ch)
		return sub
	}
	s.subs[sub] = struct{}{}
	return sub
}

// Close ends the subscription. It may be called more than once.
func (sub *Subscription) Close() {
	sub.s.mu.Lock()
	defer sub.s.mu.Unlock()
	if !sub.closed {
		sub.closed = true
		delete(sub.s.subs, sub)
		close(sub.ch)
	}
}

// Dropped reports whether the Service dropped the watcher for falling
// behind.
func (sub *Subscription) Dropped() bool { return sub.dropped.Load() }

// publishLocked records an event for n and hands it to every watcher; s.mu
// is held for writing.
func (s *Service) publishLocked(n view.Node) {
	s.publishEventLocked(Event{Node: n})
}

// publishForgetLocked records that the node name was forgotten; s.mu is
// held for writing.
func (s *Service) publishForgetLocked(name string) {
	s.publishEventLocked(Event{Node: view.Node{Name: name}, Forgotten: true})
}

func (s *Service) publishEventLocked(ev Event) {
	s.seq++
	ev.ID, ev.Seq = s.eventID(s.seq), s.seq
	s.history.add(ev)
	for sub := range s.subs {
		select {
		case sub.ch <- ev:
		default:
			sub.dropped.Store(true)
			s.met.watchersDropped.Inc()
			s.log.Warn("watcher dropped: too slow", "behind", cap(sub.ch))
			s.dropLocked(sub)
		}
	}
}

// dropLocked ends a subscription from the Service's side.
func (s *Service) dropLocked(sub *Subscription) {
	if !sub.closed {
		sub.closed = true
		delete(s.subs, sub)
		close(sub.ch)
	}
}

func (s *Service) eventID(seq uint64) string {
	return s.epoch + "-" + strconv.FormatUint(seq, 10)
}

// parseEventID returns the seq of an id of this process.
func (s *Service) parseEventID(id string) (uint64, bool) {
	epoch, seq, ok := strings.Cut(id, "-")
	if !ok || epoch != s.epoch {
		return 0, false
	}
	n, err := strconv.ParseUint(seq, 10, 64)
	return n, err == nil
}

// numSubscribers returns how many watchers are subscribed (tests).
func (s *Service) numSubscribers() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.subs)
}

// eventLog is the history of events kept for Last-Event-ID resumption: at
// most max events holding at most maxBytes (by eventSize), the oldest
// dropped first. Not safe for concurrent use (the Service's mu guards it).
type eventLog struct {
	ring          []Event // len max; the oldest kept is at start
	start, n      int
	bytes         int
	max, maxBytes int
}

func newEventLog(max, maxBytes int) eventLog {
	return eventLog{ring: make([]Event, max), max: max, maxBytes: maxBytes}
}

// add appends ev, whose Seq follows the last one added.
func (l *eventLog) add(ev Event) {
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

// since returns the events after seq after, last being the seq of the last
// event added; ok is false when the log no longer holds all of them (or
// after is from the future).
func (l *eventLog) since(after, last uint64) ([]Event, bool) {
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
