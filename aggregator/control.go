package aggregator

// Control: the administrators' resume and drain and the jobs' registration,
// relayed to a node's agent (package aggregator/relay) once the Service
// has checked that the node may be asked.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/gracewatch/gracewatch/aggregator/relay"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/nodename"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// Sentinel errors of Control.
var (
	ErrUnknownNode    = errors.New("unknown node")
	ErrUnreachable    = errors.New("node unreachable")
	ErrControlTimeout = relay.ErrControlTimeout
	ErrNotRunning     = errors.New("aggregator not running")
	ErrSend           = relay.ErrSend
)

// AgentError is an agent's refusal of a Control (ControlAck.ok false).
type AgentError = relay.AgentError

// Control asks node's agent to resume (clear its DOWN latch) or drain (latch
// it DOWN) and waits for its answer, at most Options.ControlTimeout or until
// ctx ends. It returns the node as served after the agent's answer. Errors:
// nodename.ErrInvalid (wrapped: node is not a node name), ErrUnknownNode,
// ErrUnreachable (the member is dead or left),
// ErrNotRunning, ErrSend (wrapped), ErrControlTimeout (wrapped), an
// *AgentError when the agent refused, or ctx's error. Safe for concurrent
// use; it blocks.
func (s *Service) Control(ctx context.Context, node string, action gwpb.Action, reason, by string) (view.Node, error) {
	return s.control(ctx, node, &gwpb.Control{Action: action, Reason: reason, By: by}, slog.LevelInfo)
}

// RegisterJob registers job on node's agent (or moves the expiration of
// the job registered there) and waits for its answer, as Control does.
func (s *Service) RegisterJob(ctx context.Context, node string, job *gwpb.JobRegistration, by string) (view.Node, error) {
	return s.control(ctx, node, &gwpb.Control{Action: gwpb.Action_ACTION_REGISTER_JOB, Job: job, By: by}, slog.LevelInfo)
}

// control sends c (its id set by the relay) to node's agent, if it is
// served and not gone, and waits for the ack, logging its sending and its
// success at level (failures are warnings).
func (s *Service) control(ctx context.Context, node string, c *gwpb.Control, level slog.Level) (view.Node, error) {
	if err := nodename.Validate(node); err != nil {
		return view.Node{}, err
	}
	s.mu.RLock()
	n, ok := s.view[node]
	m, running := s.mesh, s.running
	s.mu.RUnlock()
	switch {
	case !ok:
		return view.Node{}, fmt.Errorf("%w: %s", ErrUnknownNode, node)
	case view.Gone(mesh.Status(n.Member)):
		return n, fmt.Errorf("%w: %s: %s", ErrUnreachable, node, n.Reason)
	case !running || m == nil:
		return n, ErrNotRunning
	}
	if err := s.relay.Do(ctx, m, node, c, level); err != nil {
		return n, err
	}
	n, _ = s.Node(node)
	return n, nil
}
