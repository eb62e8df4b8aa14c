package meshlink

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// Defaults of the state sender.
const (
	// sendMaxInFlight bounds the attempts in flight to one aggregator.
	sendMaxInFlight = 4
	// sendRetryFirst is how long an attempt may run (or how soon after it
	// started a failed one is repeated) before the next attempt of the
	// same state starts. A new TCP connection that lost its SYN or SYN-ACK
	// retries only 1 s later, then 3 s (memberlist dials with the
	// profile's TCP timeout, 10 s in the LAN profile, for every purpose):
	// a fresh connection half a second in is the faster way through.
	sendRetryFirst = 500 * time.Millisecond
	// sendRetryMax caps the doubling delay between attempts.
	sendRetryMax = 8 * time.Second
	// sendWrites is how many attempts of one state must return without
	// an error before it counts as delivered to an aggregator. A write
	// that returned is no delivery: memberlist's SendReliable returns once
	// the bytes are in the socket's buffer and the connection closed, with
	// no answer, and on a lossy network those bytes may sit in TCP's
	// retransmission for seconds (200 ms, then 400, 800, 1,600 ...) while
	// the aggregator's central deadline runs. The second write goes over a
	// connection of its own, sendRetryFirst after the first started: two
	// streams lost is the square of one. The aggregator takes the copy it
	// already has as a duplicate (it orders by incarnation and seq).
	sendWrites = 2
	// sendWarnAfter is the failed attempts of one state to one aggregator
	// after which it is logged as a warning (before: debug).
	sendWarnAfter = 3
)

// sendFunc sends u to the named aggregator. It must return soon after ctx
// ends.
type sendFunc func(ctx context.Context, node string, u *gwpb.StateUpdate) error

// stateSender delivers the node's latest StateUpdate to every aggregator,
// latest wins: a newer state never waits behind an older one's send. Each
// publish starts an attempt to every target at once (in parallel with any
// attempt still in flight, at most maxInFlight per target); a state that a
// newer one replaced before its turn is never sent. The latest state is
// sent again until sendWrites attempts of it have returned without an
// error (a write is no delivery): sendRetryFirst after its first attempt
// started, then after doubling delays up to sendRetryMax, whether the
// previous attempt failed, still hangs in its connect, or returned.
// Aggregators order states by (incarnation, seq), so arrivals out of order
// and duplicates are harmless. The targets are the aggregators of the
// mesh's book: one that gossip lost is still a target (memberlist's word is
// no proof), reached at the address it signed. A target the mesh does not
// know (mesh.ErrUnknownMember, or ErrNotAlive) is not retried: its return
// makes the link publish again.
//
// Its methods are safe for concurrent use and never block on the network.
type stateSender struct {
	ctx   context.Context
	send  sendFunc
	clock clock.Clock
	log   *slog.Logger

	maxInFlight          int
	retryFirst, retryMax time.Duration
	writes               int // sendWrites

	mu      sync.Mutex
	closed  bool
	version uint64 // of latest, counted from 1
	latest  *gwpb.StateUpdate
	targets map[string]*sendTarget
	wg      sync.WaitGroup // attempts in flight
}

// sendTarget is one aggregator's delivery state. Guarded by stateSender.mu.
type sendTarget struct {
	name      string
	delivered uint64 // newest version delivered (its writes all returned)
	inFlight  int
	attempts  int  // attempts of the current version
	failures  int  // failed attempts of the current version
	written   int  // attempts of the current version that returned without an error
	waiting   bool // an attempt is due but every slot is taken
	timer     clock.Timer
	timerGen  uint64
	removed   bool
}

// newStateSender returns a sender whose attempts run under ctx: once ctx
// ends no attempt starts and close returns once those in flight returned.
func newStateSender(ctx context.Context, send sendFunc, clk clock.Clock, logger *slog.Logger) *stateSender {
	return &stateSender{
		ctx:         ctx,
		send:        send,
		clock:       clk,
		log:         logger,
		maxInFlight: sendMaxInFlight,
		retryFirst:  sendRetryFirst,
		retryMax:    sendRetryMax,
		writes:      sendWrites,
		targets:     make(map[string]*sendTarget),
	}
}

// publish makes u the state to deliver to targets (the alive aggregators),
// replacing any older one, and starts an attempt to each target that has a
// free slot. Targets not listed are forgotten. u must not be modified
// afterwards: attempts marshal it concurrently.
//
// It returns u's version (counted from 1; 0 when the sender is closed).
func (s *stateSender) publish(u *gwpb.StateUpdate, targets []string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.ctx.Err() != nil {
		return 0
	}
	s.version++
	s.latest = u
	keep := make(map[string]bool, len(targets))
	for _, name := range targets {
		keep[name] = true
	}
	for name, t := range s.targets {
		if !keep[name] {
			s.stopTimerLocked(t)
			t.removed = true
			delete(s.targets, name)
		}
	}
	for _, name := range targets {
		t := s.targets[name]
		if t == nil {
			t = &sendTarget{name: name}
			s.targets[name] = t
		}
		t.attempts, t.failures, t.written = 0, 0, 0
		s.stopTimerLocked(t)
		s.attemptLocked(t)
	}
	return s.version
}

// deliveredAll is the newest version that every current target has been
// delivered (all its writes returned; a delivery of a version proves the
// ones before it superseded); 0 when there is no target or one has had
// none.
func (s *stateSender) deliveredAll() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.targets) == 0 {
		return 0
	}
	least := ^uint64(0)
	for _, t := range s.targets {
		least = min(least, t.delivered)
	}
	return least
}

// resend delivers the latest state to target again, once, even if it
// has it: the aggregator asked for it (a probe), or gossip lost the
// aggregator and a delivery is the proof that it is still there. A target
// that is not among the current ones is ignored.
func (s *stateSender) resend(target string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.targets[target]
	if t == nil || s.closed || s.latest == nil {
		return
	}
	if t.delivered >= s.version {
		t.delivered = s.version - 1
	}
	t.attempts, t.failures, t.written = 0, 0, 0
	s.attemptLocked(t)
}

// close stops every retry, makes publish a no-op, and waits for the
// attempts in flight, which return once the sender's ctx has ended.
func (s *stateSender) close() {
	s.mu.Lock()
	s.closed = true
	for _, t := range s.targets {
		s.stopTimerLocked(t)
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *stateSender) stopTimerLocked(t *sendTarget) {
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
	t.timerGen++
	t.waiting = false
}

// attemptLocked starts an attempt of the latest version to t, if t does
// not have it yet, and arms the next attempt.
func (s *stateSender) attemptLocked(t *sendTarget) {
	if s.closed || t.removed || t.delivered >= s.version || s.ctx.Err() != nil {
		return
	}
	s.stopTimerLocked(t)
	if t.inFlight >= s.maxInFlight {
		t.waiting = true // started when an attempt returns
		return
	}
	t.inFlight++
	t.attempts++
	v, u := s.version, s.latest
	delay := s.retryFirst << min(t.attempts-1, 30)
	if delay <= 0 || delay > s.retryMax {
		delay = s.retryMax
	}
	gen := t.timerGen
	t.timer = s.clock.AfterFunc(delay, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if t.timerGen == gen {
			t.timer = nil
			s.attemptLocked(t)
		}
	})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := s.send(s.ctx, t.name, u)
		s.mu.Lock()
		defer s.mu.Unlock()
		t.inFlight--
		s.doneLocked(t, v, err)
		if t.waiting {
			s.attemptLocked(t)
		}
	}()
}

// doneLocked records the outcome of an attempt of version v to t.
func (s *stateSender) doneLocked(t *sendTarget, v uint64, err error) {
	switch {
	case err == nil:
		if v == s.version {
			t.written++
		}
		// An older version, which a newer one replaced, is not written
		// again: its one write counts for deliveredAll.
		if v < s.version || t.written >= s.writes {
			t.delivered = max(t.delivered, v)
		}
		if t.delivered >= s.version {
			s.stopTimerLocked(t)
		}
		if t.failures > 0 && v == s.version {
			s.log.Debug("state update delivered after failed attempts", "to", t.name, "attempts", t.attempts, "failed", t.failures)
		}
	case s.ctx.Err() != nil:
	case v != s.version:
		// A newer state replaced it: its own attempts report.
	case errors.Is(err, mesh.ErrNotAlive) || errors.Is(err, mesh.ErrUnknownMember) || errors.Is(err, mesh.ErrClosed):
		s.stopTimerLocked(t)
		s.log.Debug("state update not delivered, the aggregator is not an alive member", "to", t.name, "err", err)
	case errors.Is(err, mesh.ErrTooLarge):
		s.stopTimerLocked(t)
		s.log.Warn("state update too large to send; the gossiped meta still carries the state", "to", t.name, "err", err)
	default:
		t.failures++
		if t.failures == sendWarnAfter {
			s.log.Warn("state update not delivered yet; retrying", "to", t.name, "attempts", t.attempts, "err", err)
		} else {
			s.log.Debug("state update attempt failed", "to", t.name, "attempt", t.attempts, "err", err)
		}
	}
}
