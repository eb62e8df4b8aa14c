package aggregator

import (
	"testing"

	"github.com/gracewatch/gracewatch/aggregator/meshfake"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

func provenOnly(o *Options) { o.ProvenOnly = true }

// With node restriction, a node's state comes from its proven updates only:
// a gossiped meta (anyone with the mesh key can publish one under any name)
// neither creates a node nor changes one.
func TestProvenOnlyIgnoresGossipedState(t *testing.T) {
	h := newHarness(t, provenOnly)
	// A member seen only in gossip, claiming down: not a node.
	h.member("node9", &gwpb.Meta{Role: gwpb.Role_ROLE_AGENT, Incarnation: 9, Seq: 9, State: gwpb.State_STATE_DOWN, Reason: "spoofed"})
	if _, ok := h.svc.Node("node9"); ok {
		t.Fatal("a member known from gossip alone entered the view")
	}
	// node1 proves itself down; then gossip claims it up, newer.
	down := &gwpb.Meta{Role: gwpb.Role_ROLE_AGENT, Incarnation: 1, Seq: 5, State: gwpb.State_STATE_DOWN, Reason: "hung", SinceMs: t0.UnixMilli()}
	h.update("node1", &gwpb.StateUpdate{Meta: down, Reason: "hung", StartedMs: 1000})
	h.wantState("node1", view.StateDown)
	h.member("node1", upMeta(7, 99))
	if n := h.wantState("node1", view.StateDown); n.Reason != "hung" || n.Seq != 5 {
		t.Errorf("node1 after a newer gossiped up: %+v", n)
	}
	// Its liveness from the mesh still counts.
	h.status("node1", mesh.StatusDead)
	if n := h.node("node1"); mesh.Status(n.Member) != mesh.StatusDead {
		t.Errorf("member status %q, want dead", n.Member)
	}
	if r := h.svc.Ready(); !r.NodeRestriction {
		t.Errorf("readiness %+v: want node_restriction", r)
	}
}

// Updates are ordered by (incarnation, seq) within one agent start, and a
// later start wins: a replayed older update changes nothing; an agent that
// lost its state file (incarnation 1 again) is heard.
func TestProvenOnlyUpdateOrder(t *testing.T) {
	h := newHarness(t, provenOnly)
	meta := func(inc, seq uint64, st gwpb.State) *gwpb.Meta {
		return &gwpb.Meta{Role: gwpb.Role_ROLE_AGENT, Incarnation: inc, Seq: seq, State: st, SinceMs: t0.UnixMilli()}
	}
	up := &gwpb.StateUpdate{Meta: meta(4, 10, gwpb.State_STATE_UP), StartedMs: 1000}
	down := &gwpb.StateUpdate{Meta: meta(4, 11, gwpb.State_STATE_DOWN), Reason: "drained", StartedMs: 1000}
	h.update("node1", up)
	h.update("node1", down)
	h.update("node1", up) // replayed
	h.wantState("node1", view.StateDown)
	// Rebooted without its state: incarnation 1, a later start.
	reboot := &gwpb.StateUpdate{Meta: meta(1, 1, gwpb.State_STATE_UP), StartedMs: 5000}
	h.update("node1", reboot)
	if n := h.wantState("node1", view.StateUp); n.Incarnation != 1 {
		t.Errorf("after the reboot: %+v", n)
	}
	h.update("node1", down) // of the earlier process, replayed
	h.wantState("node1", view.StateUp)
	// So is an ack of the earlier process.
	h.mesh.Deliver("node1", &gwpb.Envelope{Body: &gwpb.Envelope_Ack{Ack: &gwpb.ControlAck{Id: "old", Ok: true, Meta: meta(4, 12, gwpb.State_STATE_DOWN)}}})
	h.sync()
	h.wantState("node1", view.StateUp)
}

// The address a node named in its newest proven update is handed to the
// mesh, which reaches the node there (mesh/reach.go): an older update, or
// one heard without node restriction, moves nothing.
func TestProvenAddrFromNewestUpdate(t *testing.T) {
	meta := func(seq uint64, addr string) *gwpb.Meta {
		return &gwpb.Meta{Role: gwpb.Role_ROLE_AGENT, Incarnation: 1, Seq: seq, State: gwpb.State_STATE_UP, Addr: addr}
	}
	h := newHarness(t, provenOnly)
	h.update("node1", &gwpb.StateUpdate{Meta: meta(5, "10.0.0.1:7946"), StartedMs: 1000})
	if got, _ := h.mesh.ProvenAddr("node1"); got != "10.0.0.1:7946" {
		t.Fatalf("proven address %q after the first update", got)
	}
	h.update("node1", &gwpb.StateUpdate{Meta: meta(4, "10.6.6.6:7946"), StartedMs: 1000}) // older: late or replayed
	if got, _ := h.mesh.ProvenAddr("node1"); got != "10.0.0.1:7946" {
		t.Errorf("an older update moved the proven address to %q", got)
	}
	h.update("node1", &gwpb.StateUpdate{Meta: meta(6, "10.0.0.2:7946"), StartedMs: 1000}) // the node moved
	if got, _ := h.mesh.ProvenAddr("node1"); got != "10.0.0.2:7946" {
		t.Errorf("proven address %q after a newer update, want 10.0.0.2:7946", got)
	}

	open := newHarness(t) // no node restriction: no word is proven
	open.update("node1", &gwpb.StateUpdate{Meta: meta(5, "10.0.0.1:7946"), StartedMs: 1000})
	if got, ok := open.mesh.ProvenAddr("node1"); ok {
		t.Errorf("without node restriction the address %q was taken", got)
	}
}

// An aggregator whose proof the mesh withdrew stops counting for
// leadership.
func TestAggregatorRoleWithdrawn(t *testing.T) {
	h := newHarness(t, provenOnly)
	agg0 := mesh.Member{Name: "agg-0", Role: gwpb.Role_ROLE_AGGREGATOR, Status: mesh.StatusAlive, Proven: true,
		Meta: &gwpb.Meta{Role: gwpb.Role_ROLE_AGGREGATOR}}
	h.mesh.SetMember(agg0)
	h.sync()
	if _, leader := h.svc.Aggregators(); leader != "agg-0" {
		t.Fatalf("leader %q, want agg-0", leader)
	}
	agg0.Role, agg0.Meta, agg0.Proven, agg0.MetaErr = gwpb.Role_ROLE_UNSPECIFIED, nil, false, errFake("aggregator meta proof expired")
	h.mesh.SetMember(agg0)
	h.sync()
	if aggs, leader := h.svc.Aggregators(); leader != "agg-1" || len(aggs) != 1 {
		t.Errorf("after the withdrawal: aggregators %+v, leader %q; want agg-1 alone", aggs, leader)
	}
	if _, ok := h.svc.Node("agg-0"); ok {
		t.Error("the former aggregator became a node")
	}
}

// Where unproven input is accepted (allow_unsigned), a node that signs its
// messages is still heard only through them: its gossip is dropped.
func TestSigningNodeGossipDropped(t *testing.T) {
	h := newHarness(t)
	down := &gwpb.Meta{Role: gwpb.Role_ROLE_AGENT, Incarnation: 1, Seq: 5, State: gwpb.State_STATE_DOWN, Reason: "hung", SinceMs: t0.UnixMilli()}
	h.update("n1", &gwpb.StateUpdate{Meta: down, Reason: "hung", StartedMs: 1000})
	m := meshfake.AgentMember("n1", upMeta(7, 99), h.clk.Now())
	m.Signs = true
	h.mesh.SetMember(m)
	h.sync()
	h.wantState("n1", view.StateDown)
	// A node without its key is heard through its gossip, as before.
	h.member("n2", downMeta(1, 1, "gossiped"))
	h.wantState("n2", view.StateDown)
}
