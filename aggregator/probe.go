package aggregator

// Ask before accuse. memberlist's word that a node is dead or left is not
// authenticated (one forged packet made a live node unreachable for
// minutes, and with unreachable_is_down drained it), and a node whose
// updates went astray looks silent to the central deadline. So before the
// aggregator serves a node down for "no report after teardown deadline",
// or serves a node memberlist says is gone as unreachable (or down), it
// asks the node directly: a signed Control with ACTION_PROBE, over TCP to
// the address last known, which the agent answers with a proven ControlAck
// (its meta) and its whole StateUpdate again. A proven answer is taken
// over gossip's verdict (Policy.ProbeWait, Policy.ReachedFor, heldUntil);
// a node that does not answer within ProbeWait, or cannot be reached at
// all, is enforced as before, on time: the probe before a central deadline
// goes out ProbeWait ahead of it.

import (
	"log/slog"
	"time"

	aggmetrics "github.com/gracewatch/gracewatch/aggregator/metrics"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// Bounds of the probes.
const (
	// DefaultReachedFor is Policy.ReachedFor of a running aggregator: a
	// node that memberlist says is gone but answers is asked again every
	// 5 s, and served unreachable at most 15 s after its last answer.
	DefaultReachedFor = 15 * time.Second
	// maxProbeWait bounds Policy.ProbeWait as ProbeWaitFor derives it.
	maxProbeWait = 2 * time.Second
	// minProbeWait is the least wait for an answer on a LAN.
	minProbeWait = 200 * time.Millisecond
	// probeGoneEvery spaces the probes of a node served unreachable (it
	// may come back without memberlist noticing: its word is no proof),
	// for probeGoneFor after it went.
	probeGoneEvery = time.Minute
	probeGoneFor   = 10 * time.Minute
	// maxProbesInFlight bounds the probes waiting for an answer at once.
	maxProbesInFlight = 64
)

// Probe reasons: the label why of gracewatch_aggregator_probes_total.
const (
	probeDeadline = aggmetrics.ProbeDeadline // before the central deadline
	probeGone     = aggmetrics.ProbeGone     // memberlist says the node is dead or left
)

// ProbeWaitFor derives Policy.ProbeWait from the clock skew allowance: half
// of it (the probe before a central deadline goes out that long ahead, so
// that its answer is in before the deadline), between 200 ms and 2 s.
func ProbeWaitFor(allowance time.Duration) time.Duration {
	return min(max(allowance/2, minProbeWait), maxProbeWait)
}

// probeState is what the Service knows of its probes of one node. Owned by
// the loop.
type probeState struct {
	inFlight bool
	sentAt   time.Time // the latest probe's
	// deadline is the central deadline (D + allowance) the latest
	// deadline probe went out ahead of: one probe per deadline.
	deadline time.Time
}

// probeResult is the outcome of one probe, handed to the loop.
type probeResult struct {
	node     string
	why      string
	answered bool
	at       time.Time
}

// nextProbe returns when node in should be asked next (zero: not), and
// why.
func (s *Service) nextProbe(in *view.NodeInput, ps *probeState, now time.Time) (time.Time, string) {
	p := s.opts.Policy
	if p.ProbeWait <= 0 || s.mesh == nil {
		return time.Time{}, ""
	}
	var at time.Time
	why := ""
	// An observed node is never accused by the central deadline (it gets a
	// would-be drain instead): nothing to ask before.
	if meta, current := view.Freshest(in); meta != nil && meta.State == view.AgentTeardown && !view.Observing(in, p) {
		if d, ok := view.EnforceAt(in, meta, current, p); ok && (ps == nil || !ps.deadline.Equal(d)) {
			at, why = view.Later(d.Add(-p.ProbeWait), now), probeDeadline
		}
	}
	if view.Gone(in.Status) && !in.StatusSince.IsZero() && now.Sub(in.StatusSince) < probeGoneFor {
		next := now
		if ps != nil && !ps.sentAt.Before(in.StatusSince) {
			every := p.ReachedFor / 3
			if !now.Before(view.HeldUntil(in, p)) {
				every = probeGoneEvery
			}
			next = ps.sentAt.Add(max(every, minProbeWait))
		}
		if at.IsZero() || next.Before(at) {
			at, why = next, probeGone
		}
	}
	return at, why
}

// scheduleProbe starts the probe of name if it is due at now, else records
// when it is (s.probeAt, which the timer covers). It runs on the loop,
// after name's recomputation.
func (s *Service) scheduleProbe(name string, in *view.NodeInput, now time.Time) {
	ps := s.probes[name]
	if ps != nil && ps.inFlight {
		delete(s.probeAt, name) // its result recomputes the node
		return
	}
	at, why := s.nextProbe(in, ps, now)
	switch {
	case at.IsZero():
		delete(s.probeAt, name)
		if ps != nil && !view.Gone(in.Status) {
			delete(s.probes, name)
		}
	case at.After(now):
		s.probeAt[name] = at
	default:
		delete(s.probeAt, name)
		if ps == nil {
			ps = &probeState{}
			s.probes[name] = ps
		}
		ps.inFlight, ps.sentAt = true, now
		if why == probeDeadline {
			if meta, current := view.Freshest(in); meta != nil {
				ps.deadline, _ = view.EnforceAt(in, meta, current, s.opts.Policy)
			}
		}
		s.startProbe(name, why, now)
	}
}

// startProbe sends node a probe and waits, on a goroutine of its own, for
// its answer (at most Policy.ProbeWait); the outcome goes back to the loop
// as an inProbe input. The answer itself (a ControlAck, then the node's
// StateUpdate) comes in as any message and sets NodeInput.Reached.
func (s *Service) startProbe(node, why string, now time.Time) {
	id, ack, cancel := s.relay.Await(node)
	s.mu.RLock()
	m := s.mesh
	s.mu.RUnlock()
	wait := s.opts.Policy.ProbeWait
	c := &gwpb.Control{Id: id, Action: gwpb.Action_ACTION_PROBE, By: s.opts.Name,
		AskedMs: now.UnixMilli(), DeadlineMs: now.Add(wait).UnixMilli()}
	s.nodeLine(slog.LevelDebug, node, "probe", "node", node, "why", why, "id", id)
	go func() {
		answered := false
		defer func() {
			cancel()
			s.enqueue(input{kind: inProbe, probe: probeResult{node: node, why: why, answered: answered, at: s.clock.Now()}})
		}()
		select {
		case s.probeSem <- struct{}{}:
			defer func() { <-s.probeSem }()
		case <-s.done:
			return
		}
		timedOut := make(chan struct{})
		t := s.clock.AfterFunc(wait, func() { close(timedOut) })
		defer t.Stop()
		if err := m.Send(node, &gwpb.Envelope{Body: &gwpb.Envelope_Control{Control: c}}); err != nil {
			s.nodeLine(slog.LevelDebug, node, "probe not delivered", "node", node, "why", why, "err", err)
			return
		}
		select {
		case <-ack:
			answered = true
		case <-timedOut:
		case <-s.done:
		}
	}()
}

// probed records the outcome of a probe; it reports whether the node's view
// may change.
func (s *Service) probed(r probeResult) bool {
	if ps := s.probes[r.node]; ps != nil {
		ps.inFlight = false
	}
	s.met.Probe(r.why, r.answered)
	in := s.inputs[r.node]
	if in == nil {
		return false
	}
	if !r.answered {
		in.ProbeFailed = r.at
		return true
	}
	if view.Gone(in.Status) {
		if s.rescued == nil {
			s.rescued = map[string]time.Time{}
		}
		if _, said := s.rescued[r.node]; !said || s.rescued[r.node].Before(in.StatusSince) {
			s.rescued[r.node] = r.at
			s.nodeLine(slog.LevelInfo, r.node, "node answered directly: memberlist's word that it is gone is not taken", "node", r.node,
				"member", string(in.Status), "since", in.StatusSince.UTC().Format(time.RFC3339Nano))
		}
	}
	return true
}

// The view's side of asking before accusing (Compute's rule 3).
