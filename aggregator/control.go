package aggregator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"

	"github.com/gracewatch/gracewatch/aggregator/nodelog"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/nodename"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// Sentinel errors of Control.
var (
	ErrUnknownNode    = errors.New("unknown node")
	ErrUnreachable    = errors.New("node unreachable")
	ErrControlTimeout = errors.New("no answer from the agent")
	ErrNotRunning     = errors.New("aggregator not running")
	ErrSend           = errors.New("cannot reach the agent")
)

// AgentError is an agent's refusal of a Control (ControlAck.ok false).
type AgentError struct {
	Node string
	Msg  string
}

func (e *AgentError) Error() string { return fmt.Sprintf("agent on %s refused: %s", e.Node, e.Msg) }

type waiter struct {
	node string
	ch   chan *gwpb.ControlAck
}

// deliverAck hands an ack to the Control call waiting for it.
func (s *Service) deliverAck(from string, ack *gwpb.ControlAck) {
	s.mu.Lock()
	w := s.waiters[ack.GetId()]
	if w != nil && w.node == from {
		delete(s.waiters, ack.GetId())
	}
	s.mu.Unlock()
	switch {
	case w == nil:
		s.nodeLine(slog.LevelDebug, from, "control ack without a waiting request (late or foreign)", "node", from, "id", ack.GetId())
	case w.node != from:
		s.nodeLine(slog.LevelWarn, from, "control ack from the wrong node ignored", "node", from, "want", w.node, "id", ack.GetId())
	default:
		w.ch <- ack // buffered, one ack per waiter
	}
}

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

// control sends c (its id set here) to node's agent and waits for the ack,
// logging its sending and its success at level (failures are warnings).
func (s *Service) control(ctx context.Context, node string, c *gwpb.Control, level slog.Level) (view.Node, error) {
	action, reason, by := c.GetAction(), c.GetReason(), c.GetBy()
	if err := nodename.Validate(node); err != nil {
		return view.Node{}, err
	}
	s.mu.Lock()
	n, ok := s.view[node]
	m, running := s.mesh, s.running
	if !ok {
		s.mu.Unlock()
		return view.Node{}, fmt.Errorf("%w: %s", ErrUnknownNode, node)
	}
	if view.Gone(mesh.Status(n.Member)) {
		s.mu.Unlock()
		return n, fmt.Errorf("%w: %s: %s", ErrUnreachable, node, n.Reason)
	}
	if !running || m == nil {
		s.mu.Unlock()
		return n, ErrNotRunning
	}
	var rnd [12]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		s.mu.Unlock()
		return n, err
	}
	id := hex.EncodeToString(rnd[:])
	w := &waiter{node: node, ch: make(chan *gwpb.ControlAck, 1)}
	s.waiters[id] = w
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.waiters, id)
		s.mu.Unlock()
	}()

	timedOut := make(chan struct{})
	t := s.clock.AfterFunc(s.opts.ControlTimeout, func() { close(timedOut) })
	defer t.Stop()
	log := s.log.With("node", node, "action", action.String(), "id", id, "by", by)
	log.Log(ctx, level, "control sent", "reason", nodelog.Text(reason), "job", nodelog.Text(c.GetJob().GetJob()))
	c.Id = id
	// The agent applies it only until the caller is told it timed out
	// (it may have been stopped, or the message queued, that long).
	asked := s.clock.Now()
	c.AskedMs, c.DeadlineMs = asked.UnixMilli(), asked.Add(s.opts.ControlTimeout).UnixMilli()
	env := &gwpb.Envelope{Body: &gwpb.Envelope_Control{Control: c}}
	if err := m.Send(node, env); err != nil {
		log.Warn("control not delivered", "err", err)
		return n, fmt.Errorf("%w: %v", ErrSend, err)
	}
	select {
	case ack := <-w.ch:
		if !ack.GetOk() {
			log.Warn("control refused by the agent", "err", ack.GetError())
			msg := ack.GetError()
			if msg == "" {
				msg = "no reason given"
			}
			return n, &AgentError{Node: node, Msg: msg}
		}
		log.Log(ctx, level, "control acknowledged")
		n, _ = s.Node(node)
		return n, nil
	case <-timedOut:
		log.Warn("control timed out", "timeout", s.opts.ControlTimeout)
		return n, fmt.Errorf("%w on %s within %v", ErrControlTimeout, node, s.opts.ControlTimeout)
	case <-ctx.Done():
		return n, ctx.Err()
	}
}
