package mesh

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/proto/gwpb"
	"github.com/hashicorp/memberlist"
)

// rawSend sends b to the named member with memberlist directly, bypassing
// the sender's own sealing: what a rogue member holding the mesh key can do.
func rawSend(t *testing.T, from *node, to string, b []byte) {
	t.Helper()
	from.mu.Lock()
	st := from.members[to]
	from.mu.Unlock()
	if st == nil {
		t.Fatalf("%s does not know %s", from.name, to)
	}
	if err := from.ml.SendReliable(&memberlist.Node{Name: to, Addr: st.ip, Port: st.port}, b); err != nil {
		t.Fatal(err)
	}
}

// forge encodes env as from, sealed with keys (nil: unsigned).
func forge(t testing.TB, env *gwpb.Envelope, keys *Keys) []byte {
	t.Helper()
	b, err := EncodeEnvelope(env)
	if err != nil {
		t.Fatal(err)
	}
	return newGuard(keys, false).sealEnvelope(b)
}

// A member that holds the mesh key but not the right keys cannot speak
// for another node, cannot command an agent, and cannot become an
// aggregator; the real members' messages still pass. Real memberlist on
// loopback.
func TestRogueMemberRefused(t *testing.T) {
	t.Parallel()
	agg := start(t, "agg-1", aggr, nil)
	n1 := start(t, "node1", agent, joining(agg.Addr()))
	// The rogue is a real node (its own key) that turned hostile, and
	// claims the aggregator role with an unsigned meta.
	rogue := start(t, "rogue", agent, func(o *Options) {
		o.Config.Join = []string{agg.Addr()}
		o.Meta = &gwpb.Meta{}
	})
	waitFor(t, 5*time.Second, "all joined", func() bool { return sees(agg.Mesh, "node1", "rogue") && sees(n1.Mesh, "agg-1", "rogue") })
	now := time.Now().UnixMilli()
	aggDropped, n1Dropped := droppedMessages(agg.Mesh), droppedMessages(n1.Mesh)

	// 1. A state update claiming node1, proven with the rogue's own key.
	fake := &gwpb.Envelope{Schema: 1, From: "node1", SentMs: now, Body: &gwpb.Envelope_State{State: &gwpb.StateUpdate{Meta: &gwpb.Meta{State: gwpb.State_STATE_UP, Seq: 99}}}}
	rawSend(t, rogue, "agg-1", forge(t, fake, rogue.guard.keys))
	// 2. The same unsigned.
	rawSend(t, rogue, "agg-1", forge(t, fake, nil))
	// 3. A Control to node1, unsigned and with the rogue's node key.
	ctrl := &gwpb.Envelope{Schema: 1, From: "agg-1", To: "node1", SentMs: now, Body: &gwpb.Envelope_Control{Control: &gwpb.Control{Id: "c1", Action: gwpb.Action_ACTION_RESUME}}}
	rawSend(t, rogue, "node1", forge(t, ctrl, nil))
	rawSend(t, rogue, "node1", forge(t, ctrl, rogue.guard.keys))
	// 4. A Forget to the aggregator, with the rogue's key.
	forget := &gwpb.Envelope{Schema: 1, From: "agg-2", SentMs: now, Body: &gwpb.Envelope_Forget{Forget: &gwpb.Forget{Names: []string{"node1"}}}}
	rawSend(t, rogue, "agg-1", forge(t, forget, rogue.guard.keys))

	// The real ones pass, after the forged ones on the same connections.
	if err := n1.Send("agg-1", &gwpb.Envelope{Body: &gwpb.Envelope_Ack{Ack: &gwpb.ControlAck{Id: "real"}}}); err != nil {
		t.Fatal(err)
	}
	if err := agg.Send("node1", &gwpb.Envelope{Body: &gwpb.Envelope_Control{Control: &gwpb.Control{Id: "real"}}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the real messages", func() bool { return len(agg.rec.messages()) >= 1 && len(n1.rec.messages()) >= 1 })
	// Each forged message travels on a stream of its own: wait until every
	// one is dropped (3 at the aggregator, 2 at node1), so that what the
	// Handlers got is all they will get of them.
	waitFor(t, 5*time.Second, "the forged messages dropped", func() bool {
		return droppedMessages(agg.Mesh) >= aggDropped+3 && droppedMessages(n1.Mesh) >= n1Dropped+2
	})
	for _, got := range agg.rec.messages() {
		if got.env.GetAck().GetId() != "real" {
			t.Errorf("aggregator accepted %v from %s", got.env, got.from)
		}
	}
	for _, got := range n1.rec.messages() {
		if got.env.GetControl().GetId() != "real" {
			t.Errorf("agent accepted %v from %s", got.env, got.from)
		}
	}
	if logs := agg.logs.String(); strings.Count(logs, "refused a message whose sender is not proven") < 2 || !strings.Contains(logs, "from=node1") {
		t.Errorf("aggregator log does not name the refused claims:\n%s", logs)
	}
	if logs := n1.logs.String(); !strings.Contains(logs, "refused a message whose sender is not proven") {
		t.Errorf("agent log does not show the refused control:\n%s", logs)
	}
}

// A rogue that claims the aggregator role is not taken for one: agents do
// not send it their state, and nobody lists it: its alive message is
// refused before memberlist's table takes it.
func TestRogueAggregatorRoleRefused(t *testing.T) {
	t.Parallel()
	agg := start(t, "agg-1", aggr, nil)
	// An aggregator with a site key of its own: its signature does not
	// verify with the cluster's public keys.
	other, err := AggregatorKeys([][]byte{[]byte(strings.Repeat("x", 32))})
	if err != nil {
		t.Fatal(err)
	}
	rogue := start(t, "aaa-rogue-agg", aggr, func(o *Options) { o.Keys = other; o.Config.Join = []string{agg.Addr()} })
	unsignedAgg := start(t, "aab-unsigned-agg", aggr, func(o *Options) { unsigned(o); o.Config.Join = []string{agg.Addr()} })
	n1 := start(t, "node1", agent, joining(agg.Addr()))
	waitFor(t, 5*time.Second, "node1 joined", func() bool { return n1.NumMembers() == 2 && agg.NumMembers() == 2 })
	waitFor(t, 5*time.Second, "the rogues refused", func() bool {
		logs := agg.logs.String()
		return contains(logs, "refused a member's alive message", "reason=aggregator_meta", "node=aaa-rogue-agg") &&
			contains(logs, "reason=aggregator_meta", "node=aab-unsigned-agg")
	})
	// Refused in NotifyAlive, before memberlist's table takes a member: the
	// refusals seen, the table holds what it will hold of them.
	if n := agg.NumMembers(); n != 2 {
		t.Errorf("memberlist's table holds %d members, want 2 (the rogues refused)", n)
	}
	_, _ = rogue, unsignedAgg
	if got := n1.AliveMembers(aggr); len(got) != 1 || got[0] != "agg-1" {
		t.Errorf("agent's aggregators = %v, want [agg-1]", got)
	}
	for _, m := range agg.Members() {
		if m.Name == "aaa-rogue-agg" || m.Name == "aab-unsigned-agg" {
			t.Errorf("aggregator lists the rogue %+v", m)
		}
	}
	for _, m := range n1.rec.changesOf("aaa-rogue-agg") {
		t.Errorf("agent's handler told of the rogue: %+v", m)
	}
}

func TestGuardEnvelopeRules(t *testing.T) {
	aggK := testKeys(t, "agg-1", aggr)
	nodeK := testKeys(t, "node1", agent)
	now := time.Now()
	ctrl := func(to string, sent time.Time) *gwpb.Envelope {
		return &gwpb.Envelope{Schema: 1, From: "agg-1", To: to, SentMs: sent.UnixMilli(), Body: &gwpb.Envelope_Control{Control: &gwpb.Control{Id: "x"}}}
	}
	agentG := newGuard(nodeK, false)
	signed := forge(t, ctrl("node1", now), aggK)
	if _, err := agentG.openEnvelope("node1", signed, now); err != nil {
		t.Fatalf("signed control: %v", err)
	}
	for name, c := range map[string]struct {
		b    []byte
		want string
	}{
		"replay":             {signed, "replay"},
		"to another node":    {forge(t, ctrl("node2", now), aggK), "addressed to"},
		"no recipient":       {forge(t, ctrl("", now), aggK), "not addressed"},
		"too old":            {forge(t, ctrl("node1", now.Add(-6*time.Minute)), aggK), "ago"},
		"from the future":    {forge(t, ctrl("node1", now.Add(2*time.Minute)), aggK), "future"},
		"unsigned":           {forge(t, ctrl("node1", now.Add(time.Second)), nil), "without a proof"},
		"signed by an agent": {forge(t, ctrl("node1", now.Add(2*time.Second)), nodeK), "aggregator's signature"},
	} {
		_, err := agentG.openEnvelope("node1", c.b, now)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
	// A flipped bit anywhere in the signed bytes fails.
	bad := forge(t, ctrl("node1", now.Add(3*time.Second)), aggK)
	bad[5] ^= 1
	if _, err := agentG.openEnvelope("node1", bad, now); err == nil {
		t.Error("tampered control accepted")
	}

	// Node messages: only the node's own key, and only an aggregator can
	// tell.
	aggG := newGuard(aggK, false)
	up := &gwpb.Envelope{Schema: 1, From: "node1", Body: &gwpb.Envelope_State{State: &gwpb.StateUpdate{}}}
	if env, err := aggG.openEnvelope("agg-1", forge(t, up, nodeK), now); err != nil || env.GetFrom() != "node1" {
		t.Fatalf("node1's own update: %v", err)
	}
	up.From = "node2"
	if _, err := aggG.openEnvelope("agg-1", forge(t, up, nodeK), now); !errors.Is(err, ErrUnproven) {
		t.Errorf("node1 speaking for node2: %v", err)
	}
	up.From = "node[1-2]"
	if _, err := aggG.openEnvelope("agg-1", forge(t, up, nodeK), now); err == nil || !strings.Contains(err.Error(), "invalid node name") {
		t.Errorf("host-list sender: %v", err)
	}
	// A rotated site key: a node key of either site key proves.
	newSite := []byte(strings.Repeat("n", 40))
	rotated, _ := AggregatorKeys([][]byte{newSite, testSite})
	up.From = "node1"
	if _, err := newGuard(rotated, false).openEnvelope("agg-1", forge(t, up, nodeK), now); err != nil {
		t.Errorf("old node key after rotation: %v", err)
	}
}

// allow_unsigned takes unproven input, except from a name proven before.
func TestGuardAllowUnsigned(t *testing.T) {
	aggK := testKeys(t, "agg-1", aggr)
	nodeK := testKeys(t, "node1", agent)
	g := newGuard(aggK, true)
	now := time.Now()
	up := &gwpb.Envelope{Schema: 1, From: "node1", Body: &gwpb.Envelope_State{State: &gwpb.StateUpdate{}}}
	if _, err := g.openEnvelope("agg-1", forge(t, up, nil), now); err != nil {
		t.Fatalf("unsigned, never proven: %v", err)
	}
	if _, err := g.openEnvelope("agg-1", forge(t, up, testKeys(t, "node2", agent)), now); err == nil {
		t.Fatal("a wrong proof is refused even with allow_unsigned")
	}
	if _, err := g.openEnvelope("agg-1", forge(t, up, nodeK), now); err != nil {
		t.Fatal(err)
	}
	if _, err := g.openEnvelope("agg-1", forge(t, up, nil), now); err == nil || !strings.Contains(err.Error(), "proven itself before") {
		t.Errorf("unsigned after proven: %v", err)
	}
	// Rollout, step 1: an agent without keys (allow_unsigned) takes the
	// aggregators that already sign, and their controls.
	bare := newGuard(nil, true)
	aggMetaSigned := newGuard(aggK, false).sealMeta("agg-9", aggr, mustMeta(t, &gwpb.Meta{Role: aggr}), now)
	if o, err := bare.openMeta("agg-9", aggMetaSigned, now); err != nil || o.proven {
		t.Errorf("signed aggregator meta at an agent without keys: %+v %v, want accepted unproven", o, err)
	}
	ctrl := &gwpb.Envelope{Schema: 1, From: "agg-9", To: "n5", SentMs: now.UnixMilli(), Body: &gwpb.Envelope_Control{Control: &gwpb.Control{Id: "c"}}}
	if _, err := bare.openEnvelope("n5", forge(t, ctrl, aggK), now); err != nil {
		t.Errorf("signed control at an agent without keys: %v", err)
	}

	// Metas: an agent's is a claim, never proven; an aggregator's needs
	// its signature, except (allow_unsigned) from a name never proven.
	meta, _ := EncodeMeta(&gwpb.Meta{Role: agent})
	if o, err := g.openMeta("node1", meta, now); err != nil || o.proven {
		t.Errorf("agent meta: %+v %v, want accepted, unproven", o, err)
	}
	aggMeta, _ := EncodeMeta(&gwpb.Meta{Role: aggr})
	if o, err := g.openMeta("agg-2", aggMeta, now); err != nil || o.proven {
		t.Errorf("unsigned aggregator meta of a new name: %+v %v", o, err)
	}
	signed := newGuard(aggK, false).sealMeta("agg-3", aggr, aggMeta, now)
	if o, err := g.openMeta("agg-3", signed, now); err != nil || !o.proven {
		t.Fatalf("signed aggregator meta: %+v %v", o, err)
	}
	if _, err := g.openMeta("agg-3", aggMeta, now); err == nil || !strings.Contains(err.Error(), "proven itself before") {
		t.Errorf("unsigned aggregator meta of a proven name: %v", err)
	}
	if _, err := newGuard(aggK, false).openMeta("agg-2", aggMeta, now); !errors.Is(err, ErrUnproven) {
		t.Errorf("unsigned aggregator meta without allow_unsigned: %v", err)
	}
	// A signature binds the name.
	if _, err := g.openMeta("agg-4", signed, now); !errors.Is(err, ErrUnproven) {
		t.Errorf("agg-3's meta under another name: %v", err)
	}
}

// An aggregator's meta proof expires unless signed again; a live
// aggregator signs again in time.
func TestAggregatorProofExpires(t *testing.T) {
	var skew atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	agg := start(t, "agg-1", aggr, nil)
	n1 := start(t, "node1", agent, func(o *Options) { o.Config.Join = []string{agg.Addr()}; o.now = clock })
	waitFor(t, 5*time.Second, "joined", func() bool { return len(n1.AliveMembers(aggr)) == 1 })
	skew.Store(int64(aggregatorProofValidity + time.Second))
	n1.expireProofs(clock())
	if got := n1.AliveMembers(aggr); len(got) != 0 {
		t.Fatalf("aggregators after the proof expired: %v", got)
	}
	ch := n1.rec.changesOf("agg-1")
	if last := ch[len(ch)-1]; last.Role == aggr || !errors.Is(last.MetaErr, ErrUnproven) {
		t.Errorf("handler not told: %+v", last)
	}
	// Signed again (as the aggregator's loop does), it is back.
	skew.Store(0)
	if !agg.resign() {
		t.Fatal("resign")
	}
	waitFor(t, 5*time.Second, "the aggregator back", func() bool { return len(n1.AliveMembers(aggr)) == 1 })
}

// The proof trailer is found only as the last field.
func TestSplitProof(t *testing.T) {
	body, _ := EncodeMeta(&gwpb.Meta{Seq: 5, Reason: "x"})
	sealed := appendProof(append([]byte(nil), body...), []byte("proof"))
	if b, p, ok := splitProof(sealed); !ok || string(p) != "proof" || string(b) != string(body) {
		t.Fatalf("split = %q %q %v", b, p, ok)
	}
	if _, _, ok := splitProof(append(sealed, body...)); ok {
		t.Error("a proof that is not last was taken")
	}
	if _, _, ok := splitProof(body); ok {
		t.Error("proof found in an unsigned meta")
	}
	if _, _, ok := splitProof(sealed[:len(sealed)-1]); ok {
		t.Error("proof found in truncated bytes")
	}
}

func mustMeta(t *testing.T, m *gwpb.Meta) []byte {
	t.Helper()
	b, err := EncodeMeta(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
