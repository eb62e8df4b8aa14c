package aggregator

// What the Service gives the HTTP edge (package httpapi's Service) beyond
// its other exported methods: the edge speaks no wire type of the mesh,
// so the Service turns its requests into them here.

import (
	"context"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/history"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// Resume asks node's agent to resume it (an administrator's request),
// waiting for its ack at most Options.ControlTimeout; by names who asked.
func (s *Service) Resume(ctx context.Context, node, reason, by string) (view.Node, error) {
	return s.Control(ctx, node, gwpb.Action_ACTION_RESUME, reason, by)
}

// Drain asks node's agent to drain it (an administrator's request), as
// Resume does.
func (s *Service) Drain(ctx context.Context, node, reason, by string) (view.Node, error) {
	return s.Control(ctx, node, gwpb.Action_ACTION_DRAIN, reason, by)
}

// ClusterConfig is the cluster's configuration as GET /v1/config serves
// it.
func (s *Service) ClusterConfig() api.ClusterConfig {
	p := s.Policy()
	return api.ClusterConfig{
		Grace:              s.Grace().Seconds(),
		ClockSkewAllowance: p.ClockSkewAllowance.Seconds(),
		UnreachableIsDown:  p.UnreachableIsDown,
		UnreachableAfter:   p.UnreachableAfter.Seconds(),
		Settle:             p.Settle.Seconds(),
		Schema:             gwpb.SchemaVersion,
		Mode:               modeName(p.Observe),
	}
}

// Now is the time by the Service's clock.
func (s *Service) Now() time.Time { return s.clock.Now() }

// AutoResume reports whether an incident's nodes are resumed when its
// cause clears (incident.Config.AutoResume).
func (s *Service) AutoResume() bool { return s.opts.Incidents.AutoResume }

// Leading reports whether this aggregator runs the actuators now.
func (s *Service) Leading() bool { return s.act.StillLeading() }

// HistoryStats are the teardown history's figures; zero when it is off.
func (s *Service) HistoryStats() history.Stats {
	if s.hist == nil {
		return history.Stats{}
	}
	return s.hist.store.Stats()
}

var _ edgeService = (*Service)(nil)
