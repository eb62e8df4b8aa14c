package aggregator

// The view's changes as events to the watchers (package aggregator/watch
// keeps them, under the Service's lock).

import (
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/aggregator/watch"
)

// Subscribe starts a watcher after lastEventID ("" for a new one). It never
// blocks the Service: a watcher that does not keep up is dropped. Close the
// subscription when done.
func (s *Service) Subscribe(lastEventID string) *watch.Subscription {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watchers.SubscribeLocked(lastEventID, func() []view.Node {
		snap := make([]view.Node, 0, len(s.names))
		for _, name := range s.names {
			snap = append(snap, s.view[name].Summary())
		}
		return snap
	})
}

// publishLocked records an event for n and hands it to every watcher; s.mu
// is held for writing.
func (s *Service) publishLocked(n view.Node) {
	s.watchers.PublishLocked(watch.Event{Node: n})
}

// publishForgetLocked records that the node name was forgotten; s.mu is
// held for writing.
func (s *Service) publishForgetLocked(name string) {
	s.watchers.PublishLocked(watch.Event{Node: view.Node{Name: name}, Forgotten: true})
}

// watcherDropped counts and logs a watcher dropped for lagging behind
// more than behind events.
func (s *Service) watcherDropped(behind int) {
	s.met.WatcherDropped()
	s.log.Warn("watcher dropped: too slow", "behind", behind)
}

// numSubscribers returns how many watchers are subscribed (tests).
func (s *Service) numSubscribers() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.watchers.LenLocked()
}
