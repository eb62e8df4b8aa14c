package aggregator

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gracewatch/gracewatch/aggregator/intake"
	"github.com/gracewatch/gracewatch/aggregator/meshfake"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// A handover carries the gone agents, and the aggregator that adopts them
// serves them exactly as the one that saw them go.
func TestHandoverServesGoneNodesTheSame(t *testing.T) {
	p := view.Policy{ClockSkewAllowance: 5 * time.Second}
	down := downMeta(2, 9, "job 7 teardown exceeded grace 2m0s: 1 unkillable (pid 42 cat, D)")
	update := &gwpb.StateUpdate{Meta: down, Reason: down.GetReason() + " (full)",
		Teardowns: []*gwpb.Teardown{{Job: "7", Phase: "overdue", DeadlineMs: ms(at(time.Minute))}}}
	origin := map[string]*view.NodeInput{
		"cn1": {Name: "cn1", Role: view.RoleAgent, Status: mesh.StatusDead, StatusSince: at(2 * time.Minute),
			Gossip: intake.DecodeMeta(down), Direct: intake.DecodeMeta(down), Update: updateIn(update)},
		"cn2": {Name: "cn2", Role: view.RoleAgent, Status: mesh.StatusLeft, StatusSince: at(3 * time.Minute),
			Gossip: intake.DecodeMeta(upMeta(1, 3))},
		"cn3": {Name: "cn3", Role: view.RoleAgent, Status: mesh.StatusAlive, Gossip: intake.DecodeMeta(upMeta(1, 4))},
		"cn4": {Name: "cn4", Role: view.RoleUnspecified, Status: mesh.StatusDead, StatusSince: at(time.Minute)},
	}
	h := intake.HandoverOf(origin)
	var names []string
	for _, g := range h.GetGone() {
		names = append(names, g.GetName())
	}
	if !reflect.DeepEqual(names, []string{"cn1", "cn2"}) {
		t.Fatalf("handover names %v, want the gone agents cn1 and cn2", names)
	}

	// Over the wire, then adopted by an aggregator that knows cn3 only.
	b, err := proto.Marshal(&gwpb.Envelope{Body: &gwpb.Envelope_Handover{Handover: h}})
	if err != nil {
		t.Fatal(err)
	}
	var env gwpb.Envelope
	if err := proto.Unmarshal(b, &env); err != nil {
		t.Fatal(err)
	}
	later := map[string]*view.NodeInput{"cn3": {Name: "cn3", Role: view.RoleAgent, Status: mesh.StatusAlive, Gossip: intake.DecodeMeta(upMeta(1, 4))}}
	dirty := map[string]bool{}
	if names, _ := intake.AdoptHandover(later, env.GetHandover(), func(string) bool { return false }, dirty, intake.MaxAdoptedGone, intake.MaxAdoptedBytes); len(names) != 2 {
		t.Fatalf("adopted %v, want 2", names)
	}
	if !dirty["cn1"] || !dirty["cn2"] || dirty["cn3"] {
		t.Fatalf("dirty %v, want cn1 and cn2 only", dirty)
	}
	now := at(10 * time.Minute)
	for _, name := range []string{"cn1", "cn2"} {
		want, got := view.ComputeNode(origin[name], now, p), view.ComputeNode(later[name], now, p)
		if !reflect.DeepEqual(want, got) {
			t.Errorf("%s served differently after the handover:\n origin %+v\n later  %+v", name, want, got)
		}
		if got.State != view.StateUnreachable {
			t.Errorf("%s: state %s, want unreachable", name, got.State)
		}
	}
	if r := view.ComputeNode(later["cn1"], now, p).Reason; !strings.Contains(r, "dead") || !strings.Contains(r, "unkillable") {
		t.Errorf("cn1 reason %q: want the death and the last reported violation", r)
	}
}

// What the aggregator knows itself wins, and hostile entries are dropped.
func TestHandoverNeverOverridesWhatIsKnown(t *testing.T) {
	known := map[string]*view.NodeInput{"cn1": {Name: "cn1", Role: view.RoleAgent, Status: mesh.StatusAlive, Gossip: intake.DecodeMeta(upMeta(3, 1))}}
	h := &gwpb.Handover{Gone: []*gwpb.GoneMember{
		{Name: "cn1", SinceMs: ms(t0), Meta: downMeta(2, 9, "old")},
		{Name: ""},
		{Name: strings.Repeat("x", 300)},
		{Name: "agg-2"},
		{Name: "cn9", SinceMs: -5, Update: &gwpb.StateUpdate{}}, // an update without meta is not kept
	}}
	dirty := map[string]bool{}
	names, _ := intake.AdoptHandover(known, h, func(name string) bool { return name == "agg-2" }, dirty, intake.MaxAdoptedGone, intake.MaxAdoptedBytes)
	n := len(names)
	if n != 1 || len(known) != 2 {
		t.Fatalf("adopted %d, inputs %v: want only cn9", n, known)
	}
	if known["cn1"].Status != mesh.StatusAlive || known["cn1"].Gossip.Seq != 1 {
		t.Fatalf("cn1 changed by the handover: %+v", known["cn1"])
	}
	cn9 := known["cn9"]
	if cn9.Status != mesh.StatusDead || !cn9.StatusSince.IsZero() || cn9.Update != nil || cn9.Direct != nil {
		t.Fatalf("cn9 %+v: want dead, since unknown, no update", cn9)
	}
	if got := view.ComputeNode(cn9, t0, view.Policy{}); got.State != view.StateUnreachable {
		t.Fatalf("cn9 served %s, want unreachable", got.State)
	}
}

// An aggregator that sees another join hands over the gone nodes, and the
// one that joined serves them as the first does.
func TestServiceHandsOverGoneNodes(t *testing.T) {
	h1 := newHarness(t)
	h2 := newHarnessClock(t, h1.clk, func(o *Options) { o.Name = "agg-2" })
	delivered := make(chan struct{}, 1)
	h1.mesh.OnSend(func(node string, env *gwpb.Envelope) error {
		if node == "agg-2" && env.GetHandover() != nil {
			h2.mesh.Deliver("agg-1", env)
			delivered <- struct{}{}
		}
		return nil
	})
	aggMember := func(name string) mesh.Member {
		return mesh.Member{Name: name, Role: gwpb.Role_ROLE_AGGREGATOR, Status: mesh.StatusAlive,
			Meta: &gwpb.Meta{Role: gwpb.Role_ROLE_AGGREGATOR}, Since: h1.clk.Now()}
	}
	h1.member("cn1", upMeta(1, 1))
	h1.member("cn2", upMeta(1, 1))
	dead := meshfake.AgentMember("cn1", downMeta(1, 2, "job 7 teardown exceeded grace 2m0s"), h1.clk.Now())
	dead.Status = mesh.StatusDead
	h1.mesh.SetMember(dead)
	h1.clk.Advance(time.Minute)
	h1.sync()
	want, ok := h1.svc.Node("cn1")
	if !ok || want.State != view.StateUnreachable {
		t.Fatalf("cn1 on agg-1: %+v, want unreachable", want)
	}

	if _, ok := h2.svc.Node("cn1"); ok {
		t.Fatal("agg-2 knows cn1 before any handover")
	}
	// agg-1 hands over the moment it sees agg-2 join, and the handover
	// reaches agg-2 before agg-2's mesh has told it of agg-1 (as happened
	// in CI): it is applied all the same.
	h1.mesh.SetMember(aggMember("agg-2"))
	h1.sync()
	select {
	case <-delivered:
	case <-time.After(testTimeout):
		t.Fatal("agg-1 sent no handover to agg-2")
	}
	h2.sync()
	got, ok := h2.svc.Node("cn1")
	if !ok {
		t.Fatal("agg-2 does not know cn1 after the handover")
	}
	if got.State != want.State || got.Reason != want.Reason || !got.Since.Equal(want.Since) {
		t.Fatalf("cn1 on agg-2: %s %q since %v; on agg-1: %s %q since %v", got.State, got.Reason, got.Since, want.State, want.Reason, want.Since)
	}
	if _, ok := h2.svc.Node("cn2"); ok {
		t.Fatal("agg-2 learned the alive cn2 from the handover; only gone nodes are handed over")
	}
	h2.mesh.SetMember(aggMember("agg-1"))
	h2.sync()
	if _, ok := h2.svc.Node("agg-1"); ok {
		t.Fatal("agg-2 serves the aggregator agg-1 as a node")
	}

	// An agent cannot hand over: its handover is ignored.
	h2.mesh.SetMember(meshfake.AgentMember("cn3", upMeta(1, 1), h1.clk.Now()))
	h2.mesh.Deliver("cn3", &gwpb.Envelope{Body: &gwpb.Envelope_Handover{Handover: &gwpb.Handover{
		Gone: []*gwpb.GoneMember{{Name: "cn9", SinceMs: ms(t0)}}}}})
	h2.sync()
	if _, ok := h2.svc.Node("cn9"); ok {
		t.Fatal("agg-2 adopted a handover from an agent")
	}
}
