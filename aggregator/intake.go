package aggregator

import (
	"log/slog"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/intake"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/nodename"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// HandleMessage implements mesh.Handler: it queues env and returns.
func (s *Service) HandleMessage(from string, env *gwpb.Envelope) {
	if env == nil {
		return
	}
	// Bounded here, on the mesh's goroutine, before it waits in the
	// inbox: a node's maximal update (4 MiB) queued whole while the loop
	// is busy cost its size for every message waiting, and maximal
	// updates from many source addresses at once held hundreds of MB
	// (e2e TestMeshFloodBounded).
	s.enqueue(input{kind: inMessage, from: from, env: intake.BoundEnvelope(env), at: s.clock.Now()})
}

// MemberChanged implements mesh.Handler: it queues m and returns.
func (s *Service) MemberChanged(m mesh.Member) {
	s.enqueue(input{kind: inMember, member: m})
}

// Bounds of the log of refused names (nodelog.Once).
const (
	// maxRefusedLogged is how many distinct refused names are logged (and
	// remembered, so that each is logged once): enough to diagnose a
	// misconfigured site or a probing sender, at most 256 × 253 bytes of
	// memory and 256 log lines.
	maxRefusedLogged = 256
	// refusedSummaryEvery spaces the lines that count the refusals past
	// maxRefusedLogged.
	refusedSummaryEvery = time.Minute
)

// refuseName reports whether name is not a node name (nodename.Validate).
// A refused name is logged (once, see nodelog.Once) with where it came
// from (what: "member", "message", "handover", "forget") and the sender;
// nothing of it enters the view. It runs on the loop.
func (s *Service) refuseName(name, what, from string) bool {
	err := nodename.Validate(name)
	if err == nil {
		return false
	}
	s.met.Refused(what)
	switch first, count := s.refused.Allow(name, s.clock.Now()); {
	case first:
		s.log.Warn("invalid node name refused: nothing of it enters the view", "what", what, "from", nodename.Quote(from),
			"name", nodename.Quote(name), "err", err)
	case count > 0:
		s.log.Warn("more invalid node names refused (not logged one by one)", "count", count, "last", nodename.Quote(name),
			"what", what, "from", nodename.Quote(from))
	}
	return true
}

// applyMember records a member; it reports whether the aggregators changed.
func (s *Service) applyMember(m mesh.Member, dirty map[string]bool) bool {
	if m.Name != s.opts.Name && s.refuseName(m.Name, "member", m.Name) {
		return false
	}
	if _, was := s.aggs[m.Name]; was && m.Role != gwpb.Role_ROLE_AGGREGATOR && m.Name != s.opts.Name {
		// Its aggregator proof expired or no longer verifies (mesh
		// withdrew the role): it no longer counts for leadership or
		// handovers, and it is not a node either.
		delete(s.aggs, m.Name)
		s.log.Warn("member no longer counts as an aggregator", "name", m.Name, "err", m.MetaErr)
		return true
	}
	if m.Name == s.opts.Name || m.Role == gwpb.Role_ROLE_AGGREGATOR {
		if m.Name != s.opts.Name {
			prev, had := s.aggs[m.Name]
			s.aggs[m.Name] = m
			if m.Status == mesh.StatusAlive && (!had || prev.Status != mesh.StatusAlive) {
				s.handoverTo = append(s.handoverTo, m.Name)
			}
		}
		return true
	}
	in, known := s.inputs[m.Name]
	if s.opts.ProvenOnly || (m.Signs && known) {
		// Node restriction: an agent's gossiped meta is a claim anyone
		// with the mesh key can make. The node enters the view with its
		// first proven update; the mesh's liveness of a known node is
		// kept (memberlist's failure detection is all there is). So for
		// a node that signs its messages where unproven input is
		// accepted (allow_unsigned, a rollout): its gossip is dropped.
		if !known {
			return false
		}
		s.strangers.Seen(m.Name)
		in.Status, in.StatusSince = m.Status, m.Since
		in.Gossip, in.GossipErr = nil, nil
		dirty[m.Name] = true
		return false
	}
	if !known && m.Role != gwpb.Role_ROLE_AGENT && m.MetaErr == nil {
		// Neither an agent nor unreadable: a role of a newer schema, or
		// a member that published no meta yet.
		return false
	}
	if !known {
		in = &view.NodeInput{Name: m.Name, FirstSeen: s.clock.Now()}
		s.inputs[m.Name] = in
	}
	s.strangers.Seen(m.Name)
	in.Role, in.Status, in.StatusSince = intake.RoleOf(m.Role), m.Status, m.Since
	in.Gossip, in.GossipErr = intake.DecodeMeta(m.Meta), m.MetaErr
	dirty[m.Name] = true
	return false
}

// applyMessage records a direct message; it reports whether env is a
// ControlAck to deliver after the recomputation.
func (s *Service) applyMessage(from string, env *gwpb.Envelope, at time.Time, dirty map[string]bool) bool {
	if from == "" {
		from = env.GetFrom()
	}
	if from == s.opts.Name || s.refuseName(from, "message", from) {
		return false
	}
	// Forget and Handover come from aggregators only. The sender need not
	// be a known aggregator yet: an aggregator hands over the moment it
	// sees this one join, and that message can overtake the member event
	// of the sender here. One known as an agent is refused.
	if env.GetForget() != nil || env.GetHandover() != nil {
		if in, agent := s.inputs[from]; agent && in.Role == view.RoleAgent {
			s.nodeLine(slog.LevelWarn, from, "forget or handover from an agent ignored", "from", from)
			return false
		}
	}
	if f := env.GetForget(); f != nil {
		s.applyForget(from, f)
		return false
	}
	if h := env.GetHandover(); h != nil {
		skip := func(name string) bool {
			_, agg := s.aggs[name]
			return agg || name == s.opts.Name || name == from || s.refuseName(name, "handover", from)
		}
		roomGone, roomBytes := s.strangers.Room()
		adopted, over := intake.AdoptHandover(s.inputs, h, skip, dirty, roomGone, roomBytes)
		s.strangers.Adopt(adopted)
		if len(adopted) > 0 {
			s.log.Info("gone nodes learned from another aggregator", "from", from, "nodes", len(adopted))
		}
		if over > 0 || len(h.GetGone()) > intake.MaxHandover {
			gone, bytes := s.strangers.Adopted()
			s.log.Warn("handover over its bound: the rest are not adopted (the aggregators that saw them go still serve them)",
				"from", from, "entries", len(h.GetGone()), "max_entries", intake.MaxHandover, "not_adopted", over,
				"adopted_gone", gone, "max_adopted_gone", intake.MaxAdoptedGone, "adopted_bytes", bytes,
				"max_adopted_bytes", intake.MaxAdoptedBytes)
		}
		return false
	}
	if _, isAgg := s.aggs[from]; isAgg {
		s.nodeLine(slog.LevelDebug, from, "message from an aggregator ignored", "from", from)
		return false
	}
	var offset time.Duration
	switch env.GetBody().(type) {
	case *gwpb.Envelope_State, *gwpb.Envelope_Ack:
		var ok bool
		if offset, ok = s.fresh(from, env, at); !ok {
			return false
		}
	}
	switch body := env.GetBody().(type) {
	case *gwpb.Envelope_State:
		u := body.State // bounded by HandleMessage, before it was queued
		if u.GetMeta() == nil {
			if ok, suppressed := s.staleLog.Allow("no meta:"+from, s.clock.Now()); ok {
				s.log.Warn("state update without meta ignored", "node", from, "suppressed", suppressed)
			}
			return false
		}
		in := s.nodeInput(from)
		if in == nil {
			s.dropUnseen(from)
			return false
		}
		in.ClockOffset, in.Reached = offset, at
		s.hist.Record(from, u) // docs/DESIGN.md §5d: its released teardowns
		s.intakeLatch(from, u)
		s.inc.ClockSkew(in.Name, in.ClockOffset)
		upd := intake.DecodeUpdate(u) // the internal node input from here on
		restarted := intake.RestartedSince(in.Update, upd)
		if intake.ReplacesUpdate(in.Update, upd) {
			in.Update = upd
			s.provenAddr(from, u.GetMeta().GetAddr())
		} else if in.Update != nil && view.Newer(in.Update.Meta, upd.Meta) {
			s.nodeLine(slog.LevelDebug, from, "older state update ignored (late, or replayed)", "node", from,
				"incarnation", upd.Meta.Incarnation, "seq", upd.Meta.Seq)
		}
		earlier := intake.RestartedSince(upd, in.Update) // of an earlier start: late or replayed
		if restarted || (!earlier && view.Newer(upd.Meta, in.Direct)) {
			// A later start resets the order: an agent that lost its
			// state file counts from incarnation 1 again.
			in.Direct = upd.Meta
		}
		if restarted && !s.opts.ProvenOnly {
			in.Gossip = nil // of the earlier process; the next member event brings the new one
		}
		if in.Role == view.RoleUnspecified && s.opts.ProvenOnly {
			in.Role = view.RoleAgent // proven by its update
		}
		dirty[from] = true
	case *gwpb.Envelope_Ack: // bounded by HandleMessage
		if m := intake.DecodeMeta(body.Ack.GetMeta()); m != nil {
			if in := s.nodeInput(from); in == nil {
				s.dropUnseen(from)
			} else {
				in.ClockOffset, in.Reached = offset, at
				s.inc.ClockSkew(in.Name, in.ClockOffset)
				// An ack carries no start time: it counts only within
				// the incarnation of the latest update (an ack of an
				// earlier agent start, late or replayed, would undo a
				// reboot's).
				if view.Newer(m, in.Direct) && (in.Update == nil || m.Incarnation == in.Update.Meta.Incarnation) {
					in.Direct = m
				}
				dirty[from] = true
			}
		}
		env.From = from
		return true
	case *gwpb.Envelope_Control:
		s.nodeLine(slog.LevelDebug, from, "control message to an aggregator ignored", "from", from)
	default:
		s.nodeLine(slog.LevelDebug, from, "message of an unknown type ignored", "from", from)
	}
	return false
}

// Bounds of fresh.
const (
	// staleLogEvery spaces the log lines of refused stale or implausible
	// messages of one node.
	staleLogEvery = time.Minute
)

// fresh checks a node's StateUpdate or ControlAck that arrived at at
// (intake.Fresh says what passes); a refusal is logged once per node and
// staleLogEvery, and counted. It returns the node's clock offset as
// measured (arrival minus send time). It runs on the loop.
func (s *Service) fresh(from string, env *gwpb.Envelope, at time.Time) (time.Duration, bool) {
	offset, what, why := intake.Fresh(env, at, s.clockAllowance(), s.opts.ProvenOnly)
	if what != "" {
		s.refuseStale(from, what, why, offset)
		return offset, false
	}
	return offset, true
}

// refuseStale counts and logs (once per node and staleLogEvery) a refused
// message.
func (s *Service) refuseStale(from, what, why string, offset time.Duration) {
	s.met.Refused(what)
	if ok, suppressed := s.staleLog.Allow(from, s.clock.Now()); ok {
		s.log.Warn("message refused: not fresh or not plausible", "node", nodename.Quote(from), "why", why,
			"clock_offset", offset.Round(time.Millisecond).String(), "suppressed", suppressed)
	}
}

// nodeInput returns the input of node, creating it for a node the mesh has
// not told about yet (a direct message may overtake the member event), or
// nil when intake.MaxUnseenNodes such nodes are known already. With node
// restriction every node enters so (its messages are proven, its gossip is
// not read), and there is no such bound: the sender is a real node.
func (s *Service) nodeInput(node string) *view.NodeInput {
	in := s.inputs[node]
	if in == nil {
		if !s.strangers.Unseen(node, !s.opts.ProvenOnly) {
			return nil
		}
		in = &view.NodeInput{Name: node, Role: view.RoleAgent, FirstSeen: s.clock.Now()}
		s.inputs[node] = in
	}
	return in
}

// dropUnseen logs (at most once a minute) that a message from a node the
// mesh has not told of was dropped for intake.MaxUnseenNodes.
func (s *Service) dropUnseen(from string) {
	s.met.Refused("unseen")
	if now := s.clock.Now(); now.Sub(s.unseenLogged) >= refusedSummaryEvery {
		s.unseenLogged = now
		s.log.Warn("message from a node the mesh has not told of dropped: too many such nodes; its gossip still brings it in",
			"from", nodename.Quote(from), "max", intake.MaxUnseenNodes)
	}
}

// intakeLatch checks the cause of a StateUpdate from node: one that breaks
// a bound is dropped (the node is then down without a named cause, so it
// joins no file system's incident), counted (intake_refused_total{what=
// "cause"}) and logged once per node and hour. A node speaks only for
// itself: its cause can only place itself in an incident. It runs on the
// loop.
func (s *Service) intakeLatch(node string, u *gwpb.StateUpdate) {
	err := intake.CheckCause(u.GetCause())
	if err == nil {
		if err = intake.CheckCause(u.GetObservedCause()); err == nil {
			return
		}
		u.ObservedCause = nil
	} else {
		u.Cause = nil
	}
	s.met.Refused("cause")
	now := s.clock.Now()
	if at, logged := s.causeLogged[node]; logged && now.Sub(at) < time.Hour {
		return
	}
	if len(s.causeLogged) >= maxRefusedLogged {
		clear(s.causeLogged)
	}
	s.causeLogged[node] = now
	s.log.Warn("a node's cause refused: it joins no incident by it", "node", nodename.Quote(node), "err", err)
}
