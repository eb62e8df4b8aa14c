package watch

import (
	"sync"
	"testing"

	"github.com/gracewatch/gracewatch/aggregator/view"
)

// A watcher starts from a snapshot, or from the events it missed when its
// id is this hub's and still in the history; one that lags a whole buffer
// behind is dropped; after EndLocked every watcher, old or new, is ended.
func TestHub(t *testing.T) {
	var mu sync.Mutex
	dropped := 0
	h := NewHub(&mu, "e1", NewEventLog(16, 1<<20), 2, func(behind int) {
		if behind != 2 {
			t.Errorf("dropped behind %d, want 2", behind)
		}
		dropped++
	})
	snapshot := func() []view.Node { return []view.Node{{Name: "n1"}} }
	mu.Lock()
	first := h.SubscribeLocked("", snapshot)
	h.PublishLocked(Event{Node: view.Node{Name: "n1", State: view.StateUp}})
	h.PublishLocked(Event{Node: view.Node{Name: "n2"}, Forgotten: true})
	resumed := h.SubscribeLocked("e1-1", snapshot)
	foreign := h.SubscribeLocked("e0-1", snapshot)
	h.PublishLocked(Event{Node: view.Node{Name: "n3"}}) // first lags: dropped
	n := h.LenLocked()
	mu.Unlock()
	if first.SnapshotID != "e1-0" || len(first.Snapshot) != 1 {
		t.Errorf("first: snapshot %v at %q", first.Snapshot, first.SnapshotID)
	}
	if resumed.Snapshot != nil || len(resumed.Missed) != 1 || resumed.Missed[0].ID != "e1-2" || !resumed.Missed[0].Forgotten {
		t.Errorf("resumed: snapshot %v, missed %+v", resumed.Snapshot, resumed.Missed)
	}
	if foreign.Snapshot == nil || foreign.SnapshotID != "e1-2" {
		t.Errorf("foreign id: snapshot %v at %q", foreign.Snapshot, foreign.SnapshotID)
	}
	if !first.Dropped() || dropped != 1 || n != 2 {
		t.Errorf("dropped %v (%d), %d watchers left: want the first dropped, 2 left", first.Dropped(), dropped, n)
	}
	mu.Lock()
	h.EndLocked()
	late := h.SubscribeLocked("", snapshot)
	n = h.LenLocked()
	mu.Unlock()
	for _, sub := range []*Subscription{resumed, foreign, late} {
		for range sub.C { // ended: drained up to its close
		}
	}
	if n != 0 {
		t.Errorf("%d watchers after the end", n)
	}
	resumed.Close() // may be called after the end
}
