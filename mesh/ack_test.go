package mesh

import (
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// The book takes an aggregator's start from its proven meta only, and an
// ack's meta is taken when it is proven, newer, and names another start.
func TestBookStartedFromProvenMetaOnly(t *testing.T) {
	t.Parallel()
	n := start(t, "node1", agent, nil)
	const addr = "127.0.0.1:1" // nothing listens: the join an ack triggers fails at once
	st := &memberState{Member: Member{Name: "agg-9", Addr: addr}}
	n.mu.Lock()
	n.members["agg-9"] = st
	n.mu.Unlock()
	signer := newGuard(testKeys(t, "agg-9", aggr), false)
	t0 := time.Now().Add(-time.Minute)
	meta := func(started int64, signedAt time.Time, sign bool) []byte {
		body, err := EncodeMeta(&gwpb.Meta{Schema: gwpb.SchemaVersion, Role: aggr, Addr: addr, StartedMs: started})
		if err != nil {
			t.Fatal(err)
		}
		if !sign {
			return body
		}
		return signer.sealMeta("agg-9", aggr, body, signedAt)
	}
	decode := func(raw []byte) {
		n.mu.Lock()
		n.decodeMemberMeta(st, raw, time.Now())
		n.mu.Unlock()
	}
	started := func() time.Time {
		for _, a := range n.Aggregators() {
			if a.Name == "agg-9" {
				return a.Started
			}
		}
		return time.Time{}
	}

	decode(meta(1000, t0, false))
	if len(n.Aggregators()) != 0 {
		t.Fatalf("an unsigned aggregator meta made a book entry: %+v", n.Aggregators())
	}
	decode(meta(1000, t0, true))
	if got := started(); !got.Equal(time.UnixMilli(1000)) {
		t.Fatalf("started %v from a proven meta, want %v", got, time.UnixMilli(1000))
	}

	if n.ackedMeta("agg-9", meta(1000, t0.Add(time.Second), true)) {
		t.Error("an ack with the same process's meta signed again was taken (gossip carries it)")
	}
	if n.ackedMeta("agg-9", meta(2000, t0.Add(2*time.Second), false)) || !started().Equal(time.UnixMilli(1000)) {
		t.Error("an ack with an unsigned meta naming a new start was taken")
	}
	if n.ackedMeta("agg-9", meta(2000, t0.Add(-time.Second), true)) {
		t.Error("an ack with a meta signed before the one known was taken")
	}
	if !n.ackedMeta("agg-9", meta(2000, t0.Add(3*time.Second), true)) || !started().Equal(time.UnixMilli(2000)) {
		t.Fatalf("an ack with a new process's proven meta not taken: started %v", started())
	}
	ch := n.rec.changesOf("agg-9")
	if len(ch) == 0 || ch[len(ch)-1].Meta.GetStartedMs() != 2000 || !ch[len(ch)-1].Proven {
		t.Errorf("MemberChanged after the ack: %+v, want the new proven meta", ch)
	}
}

// An aggregator killed without a leave and started again at once under
// the same name and address is a new process that memberlist on the agent
// never saw die, and whose new meta it would ignore (the same
// incarnation). The agent learns the new start from its next ack, joins
// it, and the new process refutes its previous life: both see each other,
// and the agent's book and Handler have the new start.
func TestAggregatorRestartSeenAtOnce(t *testing.T) {
	t.Parallel()
	agg, n1 := pair(t)
	addr := agg.Addr()
	before := n1.Aggregators()[0].Started
	if want := time.UnixMilli(agg.started.UnixMilli()); !before.Equal(want) {
		t.Fatalf("book's start %v, want the aggregator's %v", before, want)
	}
	if err := agg.Shutdown(); err != nil { // no leave: a crash
		t.Fatal(err)
	}
	agg2 := start(t, "agg-1", aggr, func(o *Options) { o.Config.Bind = addr })
	took := waitFor(t, 10*time.Second, "node1's book has the new start", func() bool {
		a := n1.Aggregators()
		return len(a) == 1 && a[0].Started.Equal(time.UnixMilli(agg2.started.UnixMilli()))
	})
	t.Logf("new start in the book %v after the restart", took)
	ch := n1.rec.changesOf("agg-1")
	if last := ch[len(ch)-1]; last.Status != StatusAlive || !last.Proven || last.Meta.GetStartedMs() != agg2.started.UnixMilli() {
		t.Errorf("last MemberChanged(agg-1) = %+v, want alive with the new start", last)
	}
	waitFor(t, 10*time.Second, "the new process knows node1", func() bool { return sees(agg2.Mesh, "node1") })
	if before.Equal(n1.Aggregators()[0].Started) {
		t.Error("start unchanged")
	}
}
