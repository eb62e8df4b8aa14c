package aggregator

import (
	"strconv"
	"strings"
	"sync/atomic"
)

// Subscription is one watcher of the view's changes (GET /v1/watch).
// Between the snapshot or missed events it starts from and the events on C
// there is no gap and no overlap.
type Subscription struct {
	// Snapshot is non-nil (possibly empty) when the watcher starts from the
	// whole view: it gave no Last-Event-ID, or one that is foreign (another
	// aggregator's, or this one's before a restart) or older than the
	// history. The nodes are summaries, sorted by name.
	Snapshot []Node
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
	if after, ok := s.parseEventID(lastEventID); ok && after <= s.seq && s.seq-after <= uint64(len(s.history)) {
		sub.Missed = make([]Event, 0, s.seq-after)
		for seq := after + 1; seq <= s.seq; seq++ {
			sub.Missed = append(sub.Missed, s.history[(seq-1)%uint64(len(s.history))])
		}
	} else {
		sub.Snapshot = make([]Node, 0, len(s.names))
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
func (s *Service) publishLocked(n Node) {
	s.publishEventLocked(Event{Node: n})
}

// publishForgetLocked records that the node name was forgotten; s.mu is
// held for writing.
func (s *Service) publishForgetLocked(name string) {
	s.publishEventLocked(Event{Node: Node{Name: name}, Forgotten: true})
}

func (s *Service) publishEventLocked(ev Event) {
	s.seq++
	ev.ID, ev.Seq = s.eventID(s.seq), s.seq
	s.history[(s.seq-1)%uint64(len(s.history))] = ev
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
