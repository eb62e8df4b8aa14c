// Package probe decides when the aggregator asks a node directly before
// it accuses it.
//
// Ask before accuse: memberlist's word that a node is dead or left is not
// authenticated (one forged packet made a live node unreachable for
// minutes, and with unreachable_is_down drained it), and a node whose
// updates went astray looks silent to the central deadline. So before the
// aggregator serves a node down for "no report after teardown deadline",
// or serves a node memberlist says is gone as unreachable (or down), it
// asks the node directly: a signed Control with ACTION_PROBE, over TCP to
// the address last known, which the agent answers with a proven ControlAck
// (its meta) and its whole StateUpdate again. A proven answer is taken
// over gossip's verdict (Policy.ProbeWait, Policy.ReachedFor, heldUntil);
// a node that does not answer within ProbeWait, or cannot be reached at
// all, is enforced as before, on time: the probe before a central deadline
// goes out ProbeWait ahead of it.

// A Schedule keeps, for the Service's loop, each node's probes and when
// the next is due; the Service sends them (package aggregator/relay) and
// hands the outcome back (Done). It imports no wire type and nothing of
// HTTP (TestImportsNoWireTypes).
package probe

import (
	"time"

	"github.com/gracewatch/gracewatch/aggregator/view"
)

// Bounds of the probes.
const (
	// DefaultReachedFor is Policy.ReachedFor of a running aggregator: a
	// node that memberlist says is gone but answers is asked again every
	// 5 s, and served unreachable at most 15 s after its last answer.
	DefaultReachedFor = 15 * time.Second
	// maxWait bounds Policy.ProbeWait as WaitFor derives it.
	maxWait = 2 * time.Second
	// minWait is the least wait for an answer on a LAN.
	minWait = 200 * time.Millisecond
	// goneEvery spaces the probes of a node served unreachable (it may
	// come back without memberlist noticing: its word is no proof), for
	// goneFor after it went.
	goneEvery = time.Minute
	goneFor   = 10 * time.Minute
	// MaxInFlight bounds the probes waiting for an answer at once.
	MaxInFlight = 64
)

// Reasons of a probe: the label why of gracewatch_aggregator_probes_total.
const (
	Deadline = "deadline" // before the central deadline
	Gone     = "gone"     // memberlist says the node is dead or left
	Restart  = "restart"  // the nodes of the reach book, at the start
)

// WaitFor derives Policy.ProbeWait from the clock skew allowance: half of
// it (the probe before a central deadline goes out that long ahead, so
// that its answer is in before the deadline), between 200 ms and 2 s.
func WaitFor(allowance time.Duration) time.Duration {
	return min(max(allowance/2, minWait), maxWait)
}

// state is what the Schedule knows of its probes of one node.
type state struct {
	inFlight bool
	sentAt   time.Time // the latest probe's
	// deadline is the central deadline (D + allowance) the latest
	// deadline probe went out ahead of: one probe per deadline.
	deadline time.Time
}

// Schedule is the probes of every node: which are in flight, when the
// next is due. It is the Service's loop's (one goroutine); nothing in it
// is safe for concurrent use.
type Schedule struct {
	policy  view.Policy
	probes  map[string]*state
	due     map[string]time.Time
	rescued map[string]time.Time // nodes whose answer overrode memberlist's word, logged once per episode
}

// NewSchedule returns the schedule of no probe under policy p (its
// ProbeWait 0: no probe).
func NewSchedule(p view.Policy) *Schedule {
	return &Schedule{policy: p, probes: map[string]*state{}, due: map[string]time.Time{}, rescued: map[string]time.Time{}}
}

// Due returns when each node's next probe is due (the loop's timer covers
// them). The map is the Schedule's: read it, do not keep it.
func (s *Schedule) Due() map[string]time.Time { return s.due }

// Forget drops node's probes (a node forgotten).
func (s *Schedule) Forget(node string) {
	delete(s.due, node)
	delete(s.probes, node)
}

// next returns when node in should be asked next (zero: not), and why.
func (s *Schedule) next(in *view.NodeInput, ps *state, now time.Time) (time.Time, string) {
	p := s.policy
	if p.ProbeWait <= 0 {
		return time.Time{}, ""
	}
	var at time.Time
	why := ""
	// An observed node is never accused by the central deadline (it gets a
	// would-be drain instead): nothing to ask before.
	if meta, current := view.Freshest(in); meta != nil && meta.State == view.AgentTeardown && !view.Observing(in, p) {
		if d, ok := view.EnforceAt(in, meta, current, p); ok && (ps == nil || !ps.deadline.Equal(d)) {
			at, why = view.Later(d.Add(-p.ProbeWait), now), Deadline
		}
	}
	if view.Gone(in.Status) && !in.StatusSince.IsZero() && now.Sub(in.StatusSince) < goneFor {
		next := now
		if ps != nil && !ps.sentAt.Before(in.StatusSince) {
			every := p.ReachedFor / 3
			if !now.Before(view.HeldUntil(in, p)) {
				every = goneEvery
			}
			next = ps.sentAt.Add(max(every, minWait))
		}
		if at.IsZero() || next.Before(at) {
			at, why = next, Gone
		}
	}
	return at, why
}

// Schedule reports whether name is to be asked at now, and why; it is then
// in flight until Done. Otherwise it records when it is due (Due). It
// runs on the loop, after name's recomputation.
func (s *Schedule) Schedule(name string, in *view.NodeInput, now time.Time) (why string, ask bool) {
	ps := s.probes[name]
	if ps != nil && ps.inFlight {
		delete(s.due, name) // its result recomputes the node
		return "", false
	}
	at, why := s.next(in, ps, now)
	switch {
	case at.IsZero():
		delete(s.due, name)
		if ps != nil && !view.Gone(in.Status) {
			delete(s.probes, name)
		}
		return "", false
	case at.After(now):
		s.due[name] = at
		return "", false
	}
	delete(s.due, name)
	if ps == nil {
		ps = &state{}
		s.probes[name] = ps
	}
	ps.inFlight, ps.sentAt = true, now
	if why == Deadline {
		if meta, current := view.Freshest(in); meta != nil {
			ps.deadline, _ = view.EnforceAt(in, meta, current, s.policy)
		}
	}
	return why, true
}

// Done records the outcome of a probe of node, answered or not, at at; in
// is its input (nil: forgotten since). It reports whether the node's view
// may change (it sets in.ProbeFailed for an unanswered probe), and whether
// the answer overrides memberlist's word that it is gone for the first
// time in this episode (to log).
func (s *Schedule) Done(node string, answered bool, at time.Time, in *view.NodeInput) (changed, rescued bool) {
	if ps := s.probes[node]; ps != nil {
		ps.inFlight = false
	}
	if in == nil {
		return false, false
	}
	if !answered {
		in.ProbeFailed = at
		return true, false
	}
	if view.Gone(in.Status) {
		if was, said := s.rescued[node]; !said || was.Before(in.StatusSince) {
			s.rescued[node] = at
			return true, true
		}
	}
	return true, false
}
