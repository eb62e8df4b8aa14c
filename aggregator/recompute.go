package aggregator

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"slices"
	"sort"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/nodelog"
	"github.com/gracewatch/gracewatch/aggregator/reservation"
	"github.com/gracewatch/gracewatch/aggregator/view"
)

// recompute recomputes the dirty nodes, publishes their changes, tells the
// actuators and re-arms the deadline timer.
func (s *Service) recompute(dirty map[string]bool) {
	now := s.clock.Now()
	p := s.opts.Policy
	names := make([]string, 0, len(dirty))
	for name := range dirty {
		names = append(names, name)
	}
	sort.Strings(names)

	type change struct {
		node   view.Node
		prev   view.State
		first  bool
		cause  string
		in     *view.NodeInput
		prevAt time.Time // the enforcement time before this recomputation
	}
	var changes []change
	var released []string // nodes whose hold ended: the actuators hear of them now
	var asked []string    // nodes whose probes to schedule (outside s.mu)
	s.mu.Lock()
	var added []string
	for _, name := range names {
		in := s.inputs[name]
		if in == nil { // forgotten (Service.Forget) after it was marked dirty
			s.probes.Forget(name)
			continue
		}
		if at, ok := s.held[name]; ok && !now.Before(at) {
			delete(s.held, name)
			released = append(released, name)
		}
		n, cause := view.ComputeNodeCause(in, now, p)
		prevAt := s.enforce[name]
		if at, ok := view.NextEnforcement(in, now, p); ok {
			s.enforce[name] = at
		} else {
			delete(s.enforce, name)
		}
		asked = append(asked, name)
		prev, had := s.view[name]
		if had && sameNode(prev, n) {
			continue
		}
		s.view[name] = n
		if prev.Mode != n.Mode || !had {
			s.modes.Move(prev.Mode, n.Mode)
		}
		if !had {
			added = append(added, name)
			if at := view.SettleEnd(in, p); now.Before(at) {
				s.held[name] = at
			}
		}
		s.publishLocked(n.Summary())
		changes = append(changes, change{n, prev.State, !had, cause, in, prevAt})
	}
	// s.names stays sorted: a few new nodes are inserted in place (an
	// aggregator asking 5,000 nodes after a restart adds them a few per
	// batch, and sorting all names again at each batch was a tenth of its
	// time); many at once, it is built again.
	if len(added) > len(s.names)/8+16 {
		s.names = s.names[:0]
		for name := range s.view {
			s.names = append(s.names, name)
		}
		sort.Strings(s.names)
	} else {
		for _, name := range added {
			if i, found := slices.BinarySearch(s.names, name); !found {
				s.names = slices.Insert(s.names, i, name)
			}
		}
	}
	s.mu.Unlock()
	s.modes.LogMixed(now)
	for _, name := range asked {
		s.scheduleProbe(name, now)
	}

	// The incidents first: the actuators hear of a node with its incident.
	for _, c := range changes {
		s.inc.Track(c.node, c.cause)
	}
	s.inc.Regroup(now)
	for _, c := range changes {
		s.observePlan(c.node)
		if c.first || c.prev != c.node.State {
			if c.first {
				s.nodeLine(slog.LevelInfo, c.node.Name, "node", "node", c.node.Name, "state", string(c.node.State), "reason", nodelog.Text(c.node.Reason))
			} else {
				s.nodeLine(slog.LevelInfo, c.node.Name, "node state changed", "node", c.node.Name, "from", string(c.prev), "state", string(c.node.State),
					"reason", nodelog.Text(c.node.Reason))
				var d time.Time
				if c.node.State == view.StateDown {
					d, _ = view.ViolationDeadline(c.in, c.cause, c.prevAt, now, p)
				}
				s.met.Transition(c.node.State, c.cause, d, now)
			}
			if _, held := s.held[c.node.Name]; !held {
				s.act.Observe(c.node.Name, c.node.State, c.node.Reason, s.otherAggregatorAlive(), s.inc.ActInfo(c.node))
			}
		} else if c.node.State == view.StateDown {
			// Its reason, its incident or its clock's earliness changed.
			if _, held := s.held[c.node.Name]; !held {
				s.act.Observe(c.node.Name, c.node.State, c.node.Reason, s.otherAggregatorAlive(), s.inc.ActInfo(c.node))
			}
		}
	}
	for _, name := range released {
		if n, ok := s.view[name]; ok {
			s.act.Observe(name, n.State, n.Reason, s.otherAggregatorAlive(), s.inc.ActInfo(n))
		}
		s.nodeLine(slog.LevelDebug, name, "settle over: the actuators decide on the node", "node", name)
	}
	if len(added) > 0 {
		s.act.SetKnown(len(s.view))
	}
	s.autoResume(now)
	s.armTimer(now)
}

// sameNode reports whether a and b serve the same JSON.
func sameNode(a, b view.Node) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

// armTimer arms the one timer for the earliest time in s.enforce, s.held
// and s.probes.Due(), and the line about the cluster's modes that its bound
// held back (modes.Count.LogMixed).
func (s *Service) armTimer(now time.Time) {
	var next time.Time
	for _, m := range []map[string]time.Time{s.enforce, s.held, s.probes.Due()} {
		for _, at := range m {
			if next.IsZero() || at.Before(next) {
				next = at
			}
		}
	}
	if at := s.modes.LineDue(); !at.IsZero() && (next.IsZero() || at.Before(next)) {
		next = at
	}
	if next.Equal(s.timerAt) && s.timer != nil {
		return
	}
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	s.timerAt = next
	if next.IsZero() {
		return
	}
	s.timerNo++
	gen := s.timerNo
	s.timer = s.clock.AfterFunc(next.Sub(now), func() { s.enqueue(input{kind: inTick, gen: gen}) })
}

// observePlan tells the reservation planner a node's served state.
func (s *Service) observePlan(n view.Node) {
	if s.plan == nil {
		return
	}
	s.plan.Observe(reservation.Node{Name: n.Name, Tearing: n.State == view.StateTeardown, Since: n.Since, FreeAt: n.FreeAt})
}
