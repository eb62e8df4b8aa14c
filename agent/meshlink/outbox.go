package meshlink

// Every released teardown reaches the aggregators at least once: the
// supervisor remembers only its latest maxReleased (64) released jobs, and
// a StateUpdate carries the latest status only, so a busy node whose
// aggregator was away for a few seconds would otherwise lose the records
// of the jobs released meanwhile from the cluster's teardown history.

import (
	"log/slog"
	"sort"
	"time"

	"github.com/gracewatch/gracewatch/agent/teardown"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// Bounds of the outbox of released teardowns.
const (
	// maxUpdateTeardowns bounds the teardowns of one StateUpdate: the
	// aggregator keeps the first 64 of an update (its maxTeardownsKept),
	// the active ones first.
	maxUpdateTeardowns = 64
	// maxUndelivered is how far back the outbox reaches: a released
	// teardown waits for every aggregator as long as fewer than 128 were
	// released on this node after it. It matches the aggregator history's
	// dedupe window (each node's last 128 keys, docs/DESIGN.md §5d): an
	// aggregator that has a record gets it again while another one waits
	// for it, and must know it for the duplicate it is. Raise both together.
	maxUndelivered = 128
	// undeliveredMaxAge is how long a released teardown waits for an
	// aggregator that never takes it (one gone for good but still in the
	// mesh's book).
	undeliveredMaxAge = 24 * time.Hour
)

// outboxEntry is one released teardown not yet delivered to every
// aggregator.
type outboxEntry struct {
	td       *gwpb.Teardown
	released time.Time
	seq      uint64 // its rank among the releases taken
	// version is the sender's version of the first update that carried
	// it; 0 while none has.
	version uint64
}

// outbox holds the released teardowns until every aggregator the state
// goes to has been delivered an update carrying them (stateSender's
// delivered versions). It is not safe for concurrent use: the Link
// holds it under its mutex.
type outbox struct {
	log     *slog.Logger
	entries map[string]*outboxEntry
	// known are the released jobs of the latest status already taken in
	// (in entries, or delivered), so that one is taken once.
	known   map[string]bool
	taken   uint64 // releases taken
	dropped int    // since the last warning
}

func newOutbox(logger *slog.Logger) *outbox {
	return &outbox{log: logger, entries: map[string]*outboxEntry{}, known: map[string]bool{}}
}

func recordKey(j teardown.Job) string {
	return j.ID + "\x00" + j.Released.UTC().Format(time.RFC3339Nano)
}

// take adds the released teardowns of st that it has not seen. The status
// comes after every change of the supervisor (OnChange), which keeps the
// latest 64 released jobs: a release is never missed between two.
func (o *outbox) take(st teardown.Status) {
	seen := make(map[string]bool, len(st.Jobs))
	var fresh []teardown.Job
	for _, j := range st.Jobs {
		if j.Phase != teardown.PhaseReleased || j.Released.IsZero() || j.Deadline.IsZero() {
			continue
		}
		k := recordKey(j)
		seen[k] = true
		if !o.known[k] {
			fresh = append(fresh, j)
		}
	}
	// In the order of their release: their ranks are the node's order.
	sort.SliceStable(fresh, func(a, b int) bool { return fresh[a].Released.Before(fresh[b].Released) })
	for _, j := range fresh {
		k := recordKey(j)
		o.known[k] = true
		o.taken++
		o.entries[k] = &outboxEntry{td: teardownOf(j), released: j.Released, seq: o.taken}
	}
	for k := range o.known {
		if !seen[k] && o.entries[k] == nil {
			delete(o.known, k)
		}
	}
}

// prune drops the entries that every target has (delivered: the newest
// version each of them was delivered, the least of them), those older than
// undeliveredMaxAge at now, and those with maxUndelivered releases or more
// after them.
func (o *outbox) prune(delivered uint64, now time.Time) {
	for k, e := range o.entries {
		switch {
		case e.version != 0 && e.version <= delivered:
			delete(o.entries, k)
		case now.Sub(e.released) > undeliveredMaxAge || o.taken-e.seq >= maxUndelivered:
			delete(o.entries, k)
			o.dropped++
		}
	}
	if o.dropped > 0 {
		o.log.Warn("released teardowns dropped before every aggregator had them", "dropped", o.dropped,
			"max_undelivered", maxUndelivered, "max_age", undeliveredMaxAge)
		o.dropped = 0
	}
}

// fill returns the teardowns of the next update: the active ones of st
// (they are the node's state: all of them), then the undelivered released
// ones, oldest first, then the other released ones of st, newest first,
// at most maxUpdateTeardowns in all; and the entries it carries for the
// first time, whose version the caller sets once the update has one.
func (o *outbox) fill(st teardown.Status) (tds []*gwpb.Teardown, first []*outboxEntry) {
	var released []teardown.Job
	for _, j := range st.Jobs {
		if j.Phase == teardown.PhaseRunning || j.Deadline.IsZero() {
			continue
		}
		if j.Phase == teardown.PhaseReleased {
			released = append(released, j)
			continue
		}
		tds = append(tds, teardownOf(j))
	}
	pending := make([]*outboxEntry, 0, len(o.entries))
	in := map[string]bool{}
	for k, e := range o.entries {
		pending = append(pending, e)
		in[k] = true
	}
	sort.Slice(pending, func(a, b int) bool {
		if !pending[a].released.Equal(pending[b].released) {
			return pending[a].released.Before(pending[b].released)
		}
		return pending[a].seq < pending[b].seq
	})
	for _, e := range pending {
		if len(tds) >= maxUpdateTeardowns {
			break
		}
		tds = append(tds, e.td)
		if e.version == 0 {
			first = append(first, e)
		}
	}
	sort.SliceStable(released, func(a, b int) bool { return released[a].Released.After(released[b].Released) })
	for _, j := range released {
		if len(tds) >= maxUpdateTeardowns {
			break
		}
		if !in[recordKey(j)] {
			tds = append(tds, teardownOf(j))
		}
	}
	return tds, first
}

// waiting reports whether released teardowns wait that the latest update
// did not carry, or that not every target has.
func (o *outbox) waiting() bool { return len(o.entries) > 0 }
