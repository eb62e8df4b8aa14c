package aggregator

import (
	"slices"
	"strings"

	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/intake"
	"github.com/gracewatch/gracewatch/aggregator/reservation"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// otherAggregatorAlive reports whether another aggregator is alive (and so
// leads, when this one does not).
func (s *Service) otherAggregatorAlive() bool {
	for _, m := range s.aggs {
		if !view.Gone(m.Status) {
			return true
		}
	}
	return false
}

// updateLeadership recomputes which aggregator runs the actuators: the
// alive one with the lowest name, this one included, once the mesh has
// joined (before that this one may not know the others yet).
func (s *Service) updateLeadership() {
	names := []string{s.opts.Name}
	info := []api.AggregatorInfo{{Name: s.opts.Name, Status: string(mesh.StatusAlive), Self: true}}
	for name, m := range s.aggs {
		info = append(info, api.AggregatorInfo{Name: name, Status: string(m.Status)})
		if !view.Gone(m.Status) {
			names = append(names, name)
		}
	}
	leader := slices.Min(names)
	slices.SortFunc(info, func(a, b api.AggregatorInfo) int { return strings.Compare(a.Name, b.Name) })
	for i := range info {
		info[i].Leader = info[i].Name == leader
	}
	joined := s.mesh != nil && s.mesh.Joined()
	leading := leader == s.opts.Name && joined
	if leader == s.opts.Name && !joined && s.recheck == nil {
		s.recheck = s.clock.AfterFunc(joinRecheck, func() {
			s.enqueue(input{kind: inRecheck})
		})
	}
	if joined && s.recheck != nil {
		s.recheck.Stop()
		s.recheck = nil
	}
	if !joined && s.recheck != nil && leader != s.opts.Name {
		s.recheck.Stop()
		s.recheck = nil
	}

	s.mu.Lock()
	s.leader, s.aggInfo = leader, info
	s.mu.Unlock()
	if leading != s.leading {
		s.leading = leading
		s.log.Info("actuator leadership", "leader", leader, "self", leading)
		s.act.SetLeader(leading, s.otherAggregatorAlive())
		if s.plan != nil {
			s.plan.SetLeader(leading)
		}
	}
}

// Reservations returns what the reservation planner keeps, and whether
// reservations are enabled.
func (s *Service) Reservations() (reservation.Status, bool) {
	if s.plan == nil {
		return reservation.Status{}, false
	}
	return s.plan.Status(), true
}

// sendHandovers sends the gone agents this aggregator knows to each of the
// named aggregators, which it has just seen join (see intake.HandoverOf). It runs
// on the loop; the sends run on goroutines of their own.
func (s *Service) sendHandovers(to []string) {
	h := intake.HandoverOf(s.inputs)
	if len(h.GetGone()) == 0 {
		return
	}
	env := &gwpb.Envelope{Body: &gwpb.Envelope_Handover{Handover: h}}
	s.sendToAggregators(to, env, "handover of gone nodes not delivered", "gone nodes handed over", "nodes", len(h.GetGone()))
}

// sendToAggregators sends env to each of the aggregators named in to, each
// send on a goroutine of its own: the loop never waits on a peer. A send
// that fails is logged as a warning with failed, a delivered one with
// delivered (none if empty); attrs say what was sent. The Forget of a node
// and the handover of the gone nodes go to the other aggregators this way.
func (s *Service) sendToAggregators(to []string, env *gwpb.Envelope, failed, delivered string, attrs ...any) {
	m := s.mesh
	for _, name := range to {
		go func() {
			args := append([]any{"to", name}, attrs...)
			if err := m.Send(name, env); err != nil {
				s.log.Warn(failed, append(args, "err", err)...)
				return
			}
			if delivered != "" {
				s.log.Info(delivered, args...)
			}
		}()
	}
}
