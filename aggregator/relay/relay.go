// Package relay sends a Control to a node's agent and waits for its
// ControlAck: the administrators' resume and drain, a job's registration,
// an incident's auto-resume and the probes that ask before accusing. A
// Relay keeps the calls waiting for an answer, by the id of their Control;
// the Service hands it every ack that comes in (Deliver).
//
// It speaks the mesh's wire types (a Control is one) but nothing of HTTP,
// of the view or of the Service (TestImports): the Service decides
// whether a node may be asked, the relay asks it.
package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/nodelog"
	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// Errors of Do.
var (
	ErrControlTimeout = errors.New("no answer from the agent")
	ErrSend           = errors.New("cannot reach the agent")
)

// AgentError is an agent's refusal of a Control (ControlAck.ok false).
type AgentError struct {
	Node string
	Msg  string
}

func (e *AgentError) Error() string { return fmt.Sprintf("agent on %s refused: %s", e.Node, e.Msg) }

// Sender is what a Relay needs of the mesh (the Service's Mesh): Send may
// block for a network timeout.
type Sender interface {
	Send(node string, env *gwpb.Envelope) error
}

type waiter struct {
	node string
	ch   chan *gwpb.ControlAck
}

// Relay keeps the Controls waiting for their ack. Safe for concurrent use.
type Relay struct {
	clock   clock.Clock
	timeout time.Duration
	log     *slog.Logger
	lines   *nodelog.Log

	mu      sync.Mutex
	waiters map[string]*waiter
}

// New returns a Relay that waits for an ack at most timeout by clk, and
// logs to log (the lines about one node within lines' budget).
func New(clk clock.Clock, timeout time.Duration, log *slog.Logger, lines *nodelog.Log) *Relay {
	return &Relay{clock: clk, timeout: timeout, log: log, lines: lines, waiters: map[string]*waiter{}}
}

// Await registers a wait for node's ack of a Control of a new id, which it
// returns with the channel the ack comes on (at most one); cancel ends the
// wait (call it once done).
func (r *Relay) Await(node string) (id string, ack <-chan *gwpb.ControlAck, cancel func()) {
	var rnd [12]byte
	_, _ = rand.Read(rnd[:]) // never fails (crypto/rand)
	id = hex.EncodeToString(rnd[:])
	w := &waiter{node: node, ch: make(chan *gwpb.ControlAck, 1)}
	r.mu.Lock()
	r.waiters[id] = w
	r.mu.Unlock()
	return id, w.ch, func() {
		r.mu.Lock()
		delete(r.waiters, id)
		r.mu.Unlock()
	}
}

// Deliver hands an ack from node from to the call waiting for it; one
// without a waiting call, or from another node than the one asked, is
// logged and dropped.
func (r *Relay) Deliver(from string, ack *gwpb.ControlAck) {
	r.mu.Lock()
	w := r.waiters[ack.GetId()]
	if w != nil && w.node == from {
		delete(r.waiters, ack.GetId())
	}
	r.mu.Unlock()
	switch {
	case w == nil:
		r.lines.Emit(r.log, slog.LevelDebug, from, "control ack without a waiting request (late or foreign)", "node", from, "id", ack.GetId())
	case w.node != from:
		r.lines.Emit(r.log, slog.LevelWarn, from, "control ack from the wrong node ignored", "node", from, "want", w.node, "id", ack.GetId())
	default:
		w.ch <- ack // buffered, one ack per waiter
	}
}

// Do sends c (its id and times set here) to node's agent through m and
// waits for the ack, at most the Relay's timeout or until ctx ends,
// logging its sending and its success at level (failures are warnings).
// Errors: ErrSend (wrapped), ErrControlTimeout (wrapped), an *AgentError
// when the agent refused, or ctx's error. It blocks.
func (r *Relay) Do(ctx context.Context, m Sender, node string, c *gwpb.Control, level slog.Level) error {
	id, ack, cancel := r.Await(node)
	defer cancel()
	timedOut := make(chan struct{})
	t := r.clock.AfterFunc(r.timeout, func() { close(timedOut) })
	defer t.Stop()
	log := r.log.With("node", node, "action", c.GetAction().String(), "id", id, "by", c.GetBy())
	log.Log(ctx, level, "control sent", "reason", nodelog.Text(c.GetReason()), "job", nodelog.Text(c.GetJob().GetJob()))
	c.Id = id
	// The agent applies it only until the caller is told it timed out
	// (it may have been stopped, or the message queued, that long).
	asked := r.clock.Now()
	c.AskedMs, c.DeadlineMs = asked.UnixMilli(), asked.Add(r.timeout).UnixMilli()
	if err := m.Send(node, &gwpb.Envelope{Body: &gwpb.Envelope_Control{Control: c}}); err != nil {
		log.Warn("control not delivered", "err", err)
		return fmt.Errorf("%w: %v", ErrSend, err)
	}
	select {
	case a := <-ack:
		if !a.GetOk() {
			log.Warn("control refused by the agent", "err", a.GetError())
			msg := a.GetError()
			if msg == "" {
				msg = "no reason given"
			}
			return &AgentError{Node: node, Msg: msg}
		}
		log.Log(ctx, level, "control acknowledged")
		return nil
	case <-timedOut:
		log.Warn("control timed out", "timeout", r.timeout)
		return fmt.Errorf("%w on %s within %v", ErrControlTimeout, node, r.timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}
