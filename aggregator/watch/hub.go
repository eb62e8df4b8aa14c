package watch

import (
	"strconv"
	"strings"
	"sync"

	"github.com/gracewatch/gracewatch/aggregator/view"
)

// Hub publishes the view's changes to the watchers and keeps their
// history. Its owner (the Service) guards it with the lock it is built
// with, which the methods named ...Locked need held (for writing, but
// LenLocked).
type Hub struct {
	owner   sync.Locker
	buffer  int
	epoch   string // qualifies event ids: they are only meaningful here
	seq     uint64
	history EventLog
	subs    map[*Subscription]struct{}
	ended   bool
	dropped func(behind int)
}

// NewHub returns a hub guarded by owner whose event ids are qualified by
// epoch (random per process), keeping history, whose watchers may lag
// buffer events behind; dropped is called (with buffer) for each watcher
// dropped for lagging more.
func NewHub(owner sync.Locker, epoch string, history EventLog, buffer int, dropped func(behind int)) *Hub {
	return &Hub{owner: owner, epoch: epoch, history: history, buffer: buffer, subs: map[*Subscription]struct{}{}, dropped: dropped}
}

// SubscribeLocked starts a watcher after lastEventID ("" for a new one):
// from the events it missed when the history still holds them all, else
// from snapshot(), the whole view (summaries, sorted by name). After
// EndLocked the subscription is ended at once.
func (h *Hub) SubscribeLocked(lastEventID string, snapshot func() []view.Node) *Subscription {
	sub := NewSubscription(h.buffer, h.owner, func(sub *Subscription) { delete(h.subs, sub) })
	missed, ok := []Event(nil), false
	if after, valid := h.parseID(lastEventID); valid {
		missed, ok = h.history.Since(after, h.seq)
	}
	if ok {
		sub.Missed = missed
	} else {
		sub.Snapshot = snapshot()
		sub.SnapshotID = h.id(h.seq)
	}
	if h.ended {
		sub.EndLocked()
		return sub
	}
	h.subs[sub] = struct{}{}
	return sub
}

// PublishLocked records ev (its ID and Seq set here) and hands it to every
// watcher; one that lags a whole buffer behind is dropped.
func (h *Hub) PublishLocked(ev Event) {
	h.seq++
	ev.ID, ev.Seq = h.id(h.seq), h.seq
	h.history.Add(ev)
	for sub := range h.subs {
		if !sub.Offer(ev) {
			h.dropped(cap(sub.C))
			sub.EndLocked()
		}
	}
}

// EndLocked ends every subscription, and those started later at once.
func (h *Hub) EndLocked() {
	h.ended = true
	for sub := range h.subs {
		sub.EndLocked()
	}
}

// LenLocked is how many watchers are subscribed.
func (h *Hub) LenLocked() int { return len(h.subs) }

func (h *Hub) id(seq uint64) string {
	return h.epoch + "-" + strconv.FormatUint(seq, 10)
}

// parseID returns the seq of an id of this hub's epoch.
func (h *Hub) parseID(id string) (uint64, bool) {
	epoch, seq, ok := strings.Cut(id, "-")
	if !ok || epoch != h.epoch {
		return 0, false
	}
	n, err := strconv.ParseUint(seq, 10, 64)
	return n, err == nil
}

// Epoch is what qualifies the hub's event ids ("<epoch>-<seq>"). It never
// changes.
func (h *Hub) Epoch() string { return h.epoch }
