package meshlink

// The node's status in the mesh's wire form: the meta it gossips and sends
// with every StateUpdate and ControlAck, and its teardown records.

import (
	"github.com/gracewatch/gracewatch/agent/teardown"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// gossipedMeta is the meta this node gossips: MetaOf without since_ms
// while the node is up. Every push-pull carries every member's meta, and
// memberlist's LZW shares what the members' states have in common; a
// timestamp of its own on every up node is what it cannot compress (at
// 1,000 members it made the push-pulls 1.5 times larger; BENCHMARKS.md,
// "Gossip bytes"). When the node is up, when it became so is the least
// interesting fact about it; aggregators still get it in the direct
// StateUpdate, and keep since_ms for teardown and down.
//
// A node that proves itself (proves: it has a node key) gossips no
// incarnation nor seq while up either: aggregators that check proofs take
// its state from its proven direct updates only, and what differs from node
// to node in the meta is what push-pulls pay for (at 10,000 members,
// 1,016 B/s per member with them, 596 without; BENCHMARKS.md, "Node
// restriction"). An aggregator that does not check proofs orders them
// (0, 0) before any direct update, which it gets too.
func gossipedMeta(st teardown.Status, proves bool) *gwpb.Meta {
	m := MetaOf(st)
	if m.State == gwpb.State_STATE_UP {
		m.SinceMs = 0
		if proves {
			m.Incarnation, m.Seq = 0, 0
		}
	}
	return m
}

// MetaOf is the compact meta of a status, as the direct StateUpdate and
// the ControlAck carry it.
func MetaOf(st teardown.Status) *gwpb.Meta {
	m := &gwpb.Meta{
		Schema:      gwpb.SchemaVersion,
		Role:        gwpb.Role_ROLE_AGENT,
		Incarnation: st.Incarnation,
		Seq:         st.Seq,
		SinceMs:     st.Since.UnixMilli(),
		Reason:      st.Reason,
	}
	switch st.State {
	case teardown.StateUp:
		m.State = gwpb.State_STATE_UP
	case teardown.StateTeardown:
		m.State = gwpb.State_STATE_TEARDOWN
	case teardown.StateDown:
		m.State = gwpb.State_STATE_DOWN
	}
	if !st.FreeAt.IsZero() {
		m.FreeAtMs = st.FreeAt.UnixMilli()
	}
	// The deadline of the latest teardown still in progress: with it an
	// aggregator serves the node down if nothing newer arrives by then.
	// It is when the agent judges it (Judged: D, or later while its E is
	// in question), so that no aggregator judges by a stale E.
	for _, j := range st.Jobs {
		tearing := (j.Phase == teardown.PhaseTeardown || j.Phase == teardown.PhaseOverdue) && !j.Deadline.IsZero()
		// A running job asked about at its E + G is held too.
		if (tearing || !j.Held.IsZero()) && j.Judged().UnixMilli() > m.DeadlineMs {
			m.DeadlineMs = j.Judged().UnixMilli()
		}
	}
	// A job still running past its E makes the node tear down as well
	// (free_at is its E + G): that deadline holds at the aggregators too.
	if m.FreeAtMs > m.DeadlineMs {
		m.DeadlineMs = m.FreeAtMs
	}
	return m
}

// teardownsOf is the teardowns of st as a StateUpdate carries them, without
// the outbox's (tests, and the shape of one status).
func teardownsOf(st teardown.Status) []*gwpb.Teardown {
	var out []*gwpb.Teardown
	for _, j := range st.Jobs {
		if j.Phase == teardown.PhaseRunning || j.Deadline.IsZero() {
			continue
		}
		out = append(out, teardownOf(j))
	}
	return out
}

// teardownOf is one job's teardown record: its clock, and for the
// cluster's history its release, user and command (gwpb.Teardown 8-10).
func teardownOf(j teardown.Job) *gwpb.Teardown {
	t := &gwpb.Teardown{Job: j.ID, Phase: string(j.Phase), DeadlineMs: j.Judged().UnixMilli(), Outcome: j.Outcome,
		GraceMs: j.Grace.Milliseconds(), User: j.User, Command: j.Command}
	if !j.Ended.IsZero() {
		t.EndedMs = j.Ended.UnixMilli()
	}
	if !j.Expiration.IsZero() {
		t.ExpirationMs = j.Expiration.UnixMilli()
	}
	if j.Phase == teardown.PhaseReleased && !j.Released.IsZero() {
		t.ReleasedMs = j.Released.UnixMilli()
	}
	return t
}
