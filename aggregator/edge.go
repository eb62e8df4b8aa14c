package aggregator

// What the Service gives the HTTP edge (package httpapi's Service) beyond
// its other exported methods: the edge speaks no wire type of the mesh,
// so the Service turns its requests into them here; and edge, the adapter
// that classifies the Service's errors for the edge's answers.

import (
	"context"
	"errors"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/actuate"
	"github.com/gracewatch/gracewatch/aggregator/advisor"
	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/history"
	"github.com/gracewatch/gracewatch/aggregator/httpapi"
	"github.com/gracewatch/gracewatch/aggregator/modes"
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
		Mode:               modes.Name(p.Observe),
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
	return s.hist.Stats()
}

// Advise answers the grace advisor's query q (its NowMs and InForce are
// filled in) over the teardown history and the teardowns running in the
// view now; history.ErrOff when the history is off. Safe for concurrent
// use.
func (s *Service) Advise(q advisor.Query) (*advisor.Advice, error) {
	if s.hist == nil {
		return nil, history.ErrOff
	}
	return s.hist.Advise(q, s.opts.Grace, s.Nodes())
}

// edge is s as the HTTP edge asks it (httpapi.Service): the Service's
// methods, with the errors of those whose answer depends on them wrapped
// in their httpapi.Failure.
type edge struct{ *Service }

var _ httpapi.Service = edge{}

// Resume is Service.Resume with its error classified.
func (e edge) Resume(ctx context.Context, node, reason, by string) (view.Node, error) {
	n, err := e.Service.Resume(ctx, node, reason, by)
	return n, actionError(err)
}

// Drain is Service.Drain with its error classified.
func (e edge) Drain(ctx context.Context, node, reason, by string) (view.Node, error) {
	n, err := e.Service.Drain(ctx, node, reason, by)
	return n, actionError(err)
}

// Forget is Service.Forget with its error classified.
func (e edge) Forget(ctx context.Context, name, by string) error {
	return actionError(e.Service.Forget(ctx, name, by))
}

// ConfirmIncident is Service.ConfirmIncident with its error classified.
func (e edge) ConfirmIncident(id uint64, reason, by string, d time.Duration) (actuate.ConfirmScope, error) {
	scope, err := e.Service.ConfirmIncident(id, reason, by, d)
	switch {
	case errors.Is(err, ErrUnknownIncident):
		return scope, &httpapi.Error{Failure: httpapi.NotFound, Err: err}
	case errors.Is(err, ErrIncidentClosed), errors.Is(err, ErrNotLeader):
		return scope, &httpapi.Error{Failure: httpapi.Conflict, Err: err}
	}
	return scope, err
}

// actionError is the error of a node action (resume, drain, forget) with
// its httpapi.Failure; err itself when it has none.
func actionError(err error) error {
	var ae *AgentError
	f := httpapi.Internal
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrUnknownNode):
		f = httpapi.NotFound
	case errors.Is(err, ErrUnreachable), errors.As(err, &ae), errors.Is(err, ErrNotGone):
		f = httpapi.Conflict
	case errors.Is(err, ErrControlTimeout):
		f = httpapi.Timeout
	case errors.Is(err, ErrSend):
		f = httpapi.Unsent
	case errors.Is(err, ErrNotRunning):
		f = httpapi.Unavailable
	default:
		return err
	}
	return &httpapi.Error{Failure: f, Err: err}
}
