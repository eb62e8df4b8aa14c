package intake

import (
	"time"

	"github.com/gracewatch/gracewatch/aggregator/view"
)

// ReplacesUpdate reports whether StateUpdate u replaces old. The agent's
// sends arrive in any order (it starts a newer one without waiting for an
// older one, and repeats one that seems lost): a newer (incarnation, seq)
// wins; of two of the same state, the one with the later report (a
// diagnosis adds a report without changing the state).
//
// Updates of a later agent start (started_ms) replace those of an earlier
// one whatever their order, and never the reverse: an agent that lost its
// state file counts from incarnation 1 again, and an update of an earlier
// process is late or replayed.
func ReplacesUpdate(old, u *view.NodeUpdate) bool {
	if old == nil {
		return true
	}
	if a, b := old.StartedMs, u.StartedMs; a != 0 && b != 0 && a != b {
		return b > a
	}
	switch {
	case view.Newer(u.Meta, old.Meta):
		return true
	case view.Newer(old.Meta, u.Meta):
		return false
	}
	return !latestTaken(u).Before(latestTaken(old))
}

// latestTaken is when u's latest report was taken; the zero time without
// one (or without a known time).
func latestTaken(u *view.NodeUpdate) time.Time {
	var t time.Time
	for _, r := range u.Reports {
		if r.Taken.After(t) {
			t = r.Taken
		}
	}
	return t
}

// RestartedSince reports whether u comes from a later start of the agent
// than old.
func RestartedSince(old, u *view.NodeUpdate) bool {
	if old == nil || u == nil {
		return false
	}
	a, b := old.StartedMs, u.StartedMs
	return a != 0 && b > a
}
