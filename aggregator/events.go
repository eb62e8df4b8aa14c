package aggregator

import (
	"strconv"
	"strings"

	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/aggregator/watch"
)

// Subscribe starts a watcher after lastEventID ("" for a new one). It never
// blocks the Service: a watcher that does not keep up is dropped. Close the
// subscription when done.
func (s *Service) Subscribe(lastEventID string) *watch.Subscription {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub := watch.NewSubscription(s.opts.SubscriberBuffer, &s.mu, func(sub *watch.Subscription) { delete(s.subs, sub) })
	missed, ok := []watch.Event(nil), false
	if after, valid := s.parseEventID(lastEventID); valid {
		missed, ok = s.history.Since(after, s.seq)
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
		sub.EndLocked()
		return sub
	}
	s.subs[sub] = struct{}{}
	return sub
}

// publishLocked records an event for n and hands it to every watcher; s.mu
// is held for writing.
func (s *Service) publishLocked(n view.Node) {
	s.publishEventLocked(watch.Event{Node: n})
}

// publishForgetLocked records that the node name was forgotten; s.mu is
// held for writing.
func (s *Service) publishForgetLocked(name string) {
	s.publishEventLocked(watch.Event{Node: view.Node{Name: name}, Forgotten: true})
}

func (s *Service) publishEventLocked(ev watch.Event) {
	s.seq++
	ev.ID, ev.Seq = s.eventID(s.seq), s.seq
	s.history.Add(ev)
	for sub := range s.subs {
		if !sub.Offer(ev) {
			s.met.WatcherDropped()
			s.log.Warn("watcher dropped: too slow", "behind", cap(sub.C))
			s.dropLocked(sub)
		}
	}
}

// dropLocked ends a subscription from the Service's side.
func (s *Service) dropLocked(sub *watch.Subscription) {
	sub.EndLocked()
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
