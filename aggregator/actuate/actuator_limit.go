package actuate

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/incident"
)

// The blast-radius limit in front of the on="down" actuators
// (docs/DESIGN.md §5b): at most limit.Of(known) nodes drained within
// limit.Window without an administrator. Past it a node is still served
// down (the truth), but its drain waits: it is held until a slot frees (a
// drained node comes back, or its drain leaves the window) or an
// administrator confirms its incident. The limit never delays the first
// drains, only those past it; an administrator's own drain (the agent's
// admin_drain) is not limited, and neither is the reservation planner,
// which drains nothing. Everything here runs under a.mu.

// heldLogEvery spaces the log lines that count the held drains: one line
// when drains start to be held, then at most one a minute while the number
// changes, never one per node.
const heldLogEvery = time.Minute

// SetLimit sets the limit (before Run; the zero Limit limits nothing).
func (a *Actuators) SetLimit(l incident.Limit) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.limit = l
}

// SetKnown tells the number of nodes the limit is a fraction of; a larger
// number may let held drains through.
func (a *Actuators) SetKnown(n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if n == a.known {
		return
	}
	grew := n > a.known
	a.known = n
	if grew {
		a.kickHeldLocked()
	}
}

// admitLocked reports whether n's drain may run now: it already took its
// slot for this down, it is not limited, a confirmation of its incident
// covers it (coveredLocked), or a slot is free (taken here). Otherwise it
// holds n and returns false.
func (a *Actuators) admitLocked(name string, n *actNode) bool {
	if n.admitted == n.epDown {
		return true
	}
	now := a.clock.Now()
	free := !a.limit.Enabled() || !n.info.Limited || a.coveredLocked(name, n, now)
	if !free && a.budget.Used(now, a.limit.Window) < a.limit.Of(a.known) {
		a.budget.Take(name, now)
		free = true
	}
	if free {
		if n.held {
			a.log.Info("held drain let through", "node", name, "incident", n.info.Incident, "held_for", now.Sub(n.heldAt).Round(time.Second))
		}
		n.admitted = n.epDown
		a.setHeldLocked(n, false, now)
		return true
	}
	a.setHeldLocked(n, true, now)
	a.armLimitTimerLocked(now)
	return false
}

// setHeldLocked marks n held or not, and keeps the count and its log.
func (a *Actuators) setHeldLocked(n *actNode, held bool, now time.Time) {
	if n.held == held {
		return
	}
	n.held = held
	if held {
		n.heldAt = now
		a.heldCount++
		if a.heldCount == 1 || now.Sub(a.heldLogged) >= heldLogEvery {
			a.heldLogged = now
			a.log.Warn("drains held by the blast-radius limit: the nodes are served down, their drains wait for a slot or an administrator (aggregator incidents; aggregator incident confirm ID)",
				"held", a.heldCount, "limit", a.limit.Of(a.known), "window", a.limit.Window, "known_nodes", a.known)
		}
	} else {
		a.heldCount--
	}
	if a.onHeld != nil {
		a.onHeld(a.heldCount)
	}
}

// releaseLocked gives node's slot back: its drain failed, or it came back.
func (a *Actuators) releaseLocked(node string) {
	a.budget.Release(node)
	a.kickHeldLocked()
}

// leaveDownLocked: n leaves down. Its drain, if held, is no longer wanted;
// if it is back (schedulable again), its slot is free again. A node that
// goes from down to unreachable is not back: it keeps its slot, so that
// nodes flapping between the two (a mesh under load) never let more drains
// through than the limit.
func (a *Actuators) leaveDownLocked(name string, n *actNode, back bool) {
	a.setHeldLocked(n, false, a.clock.Now())
	if back {
		a.uncoverLocked(name)
		a.releaseLocked(name)
	}
}

// kickHeldLocked tries the held drains again, oldest first.
func (a *Actuators) kickHeldLocked() {
	if a.heldCount == 0 || !a.leader {
		return
	}
	type h struct {
		name string
		at   time.Time
	}
	var held []h
	for name, n := range a.nodes {
		if n.held {
			held = append(held, h{name, n.heldAt})
		}
	}
	slices.SortFunc(held, func(x, y h) int {
		if c := x.at.Compare(y.at); c != 0 {
			return c
		}
		return strings.Compare(x.name, y.name)
	})
	for _, x := range held {
		a.kickLocked(x.name, a.nodes[x.name])
	}
}

// armLimitTimerLocked arms the timer that tries the held drains again when
// the oldest slot leaves the window.
func (a *Actuators) armLimitTimerLocked(now time.Time) {
	next := a.budget.NextFree(a.limit.Window)
	if next.IsZero() || a.ctx.Err() != nil {
		return
	}
	if a.limitTimer != nil {
		a.limitTimer.Stop()
	}
	a.limitTimer = a.clock.AfterFunc(max(next.Sub(now), 0), func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.limitTimer = nil
		a.kickHeldLocked()
	})
}

// confirmation is what an administrator's confirmation of an incident
// covers (docs/DESIGN.md §5b): the drains of the nodes that were in it
// when confirmed, for their down then (a node leaves nodes when it comes
// back), and, until until, the drains of every node of the incident. A
// node that joins later is not covered: its drain takes a slot of the
// limit like any other, and is held past it until the incident is
// confirmed again. Confirming again adds the incident's nodes then and
// keeps the later until.
type confirmation struct {
	at, until time.Time
	nodes     map[string]bool
}

// coveredLocked reports whether a confirmation of n's incident covers its
// drain at now; one that its until covers is added to its nodes, so that
// the answer of /v1/incidents names every node it let through.
func (a *Actuators) coveredLocked(name string, n *actNode, now time.Time) bool {
	c := a.confirmed[n.info.Incident]
	switch {
	case n.info.Incident == 0 || c == nil:
		return false
	case c.nodes[name]:
		return true
	case now.Before(c.until):
		c.nodes[name] = true
		return true
	}
	return false
}

// uncoverLocked drops node from every confirmation: it came back (or was
// forgotten), and its next down is not what an administrator saw.
func (a *Actuators) uncoverLocked(node string) {
	for _, c := range a.confirmed {
		delete(c.nodes, node)
	}
}

// ConfirmScope is what an incident's confirmation covers now (the
// internal form of api.IncidentConfirmation and api.Confirmation): the
// nodes whose drains it lets past the limit (the incident's nodes when it
// was confirmed that have not come back since, and those it let through
// before Until), when it was last confirmed, and until when it covers
// every drain of the incident (zero: never). Released is how many held
// drains a confirmation let through (0 but in the answer of confirm).
type ConfirmScope struct {
	Released int
	Nodes    []string
	At       time.Time
	Until    time.Time
}

// Confirm records an administrator's confirmation of incident id, whose
// nodes are nodes now: their held drains run past the limit (and take no
// slot), and so do, until until (zero: none), those of every node of the
// incident; not those of the nodes that join it later. It returns how
// many drains it let through, and what the confirmation covers.
func (a *Actuators) Confirm(id uint64, nodes []string, until time.Time) ConfirmScope {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.confirmed[id]
	if c == nil {
		c = &confirmation{nodes: map[string]bool{}}
		a.confirmed[id] = c
	}
	c.at = a.clock.Now()
	if until.After(c.until) {
		c.until = until
	}
	for _, name := range nodes {
		c.nodes[name] = true
	}
	before := a.heldCount
	for name, n := range a.nodes {
		if n.held && n.info.Incident == id {
			a.kickLocked(name, n)
		}
	}
	return ConfirmScope{Released: before - a.heldCount, Nodes: slices.Sorted(maps.Keys(c.nodes)), At: c.at, Until: c.until}
}

// ForgetIncident drops the confirmation of an incident that closed.
func (a *Actuators) ForgetIncident(id uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.confirmed, id)
}

// LimitStatus is the limit's state as /v1/incidents and /readyz show it.
type LimitStatus struct {
	Enabled bool
	Limit   int
	Used    int
	Window  time.Duration
	Known   int
	// Held are the held drains by incident (0: none), sorted.
	Held      map[uint64][]string
	HeldCount int
	// Confirmed are the incidents an administrator confirmed, with what
	// each confirmation covers now (Released is 0).
	Confirmed map[uint64]ConfirmScope
}

// status returns the limit's state.
func (a *Actuators) LimitStatus() LimitStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.clock.Now()
	st := LimitStatus{Enabled: a.limit.Enabled(), Window: a.limit.Window, Known: a.known, HeldCount: a.heldCount,
		Held: map[uint64][]string{}, Confirmed: map[uint64]ConfirmScope{}}
	if st.Enabled {
		st.Limit = a.limit.Of(a.known)
		st.Used = a.budget.Used(now, a.limit.Window)
	}
	if a.heldCount > 0 {
		for name, n := range a.nodes {
			if n.held {
				st.Held[n.info.Incident] = append(st.Held[n.info.Incident], name)
			}
		}
		for _, names := range st.Held {
			slices.Sort(names)
		}
	}
	for id, c := range a.confirmed {
		st.Confirmed[id] = ConfirmScope{Nodes: slices.Sorted(maps.Keys(c.nodes)), At: c.at, Until: c.until}
	}
	return st
}
