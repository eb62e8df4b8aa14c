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
	m := s.mesh
	for _, name := range to {
		go func() {
			if err := m.Send(name, env); err != nil {
				s.log.Warn("handover of gone nodes not delivered", "to", name, "nodes", len(h.GetGone()), "err", err)
				return
			}
			s.log.Info("gone nodes handed over", "to", name, "nodes", len(h.GetGone()))
		}()
	}
}
