package aggregator

// Ask before accuse (package aggregator/probe decides when): the probes'
// sending, through the relay, and their outcome back on the loop.

import (
	"log/slog"
	"time"

	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// probeResult is the outcome of one probe, handed to the loop.
type probeResult struct {
	node     string
	why      string
	answered bool
	at       time.Time
}

// scheduleProbe starts the probe of name if it is due at now (else the
// schedule records when it is, and the timer covers it). It runs on the
// loop, after name's recomputation.
func (s *Service) scheduleProbe(name string, now time.Time) {
	if why, ask := s.probes.Schedule(name, s.inputs[name], now); ask {
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
	s.met.Probe(r.why, r.answered)
	in := s.inputs[r.node]
	changed, rescued := s.probes.Done(r.node, r.answered, r.at, in)
	if rescued {
		s.nodeLine(slog.LevelInfo, r.node, "node answered directly: memberlist's word that it is gone is not taken", "node", r.node,
			"member", string(in.Status), "since", in.StatusSince.UTC().Format(time.RFC3339Nano))
	}
	return changed
}

// The view's side of asking before accusing (Compute's rule 3).
