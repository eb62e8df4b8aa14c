package mesh

import (
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gracewatch/gracewatch/internal/testutil/rogue"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// crafter returns a rogue that writes memberlist's own messages into the
// tests' cluster (insecure, labelled), closed at the test's end.
func crafter(t *testing.T) *rogue.Crafter {
	t.Helper()
	c, err := rogue.New(testConfig().Label, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// pair starts an aggregator and an agent joined to it, both seeing each
// other.
func pair(t *testing.T) (agg, n1 *node) {
	t.Helper()
	agg = start(t, "agg-1", aggr, nil)
	n1 = start(t, "node1", agent, joining(agg.Addr()))
	waitFor(t, 5*time.Second, "joined", func() bool { return sees(n1.Mesh, "agg-1") && sees(agg.Mesh, "node1") })
	waitFor(t, 5*time.Second, "agg-1 in node1's book", func() bool { return len(n1.Aggregators()) == 1 })
	return agg, n1
}

// delivered sends an ack from n1 to agg-1 and waits until agg-1 has it.
func delivered(t *testing.T, n1, agg *node, id string) {
	t.Helper()
	if err := n1.Send("agg-1", &gwpb.Envelope{Body: &gwpb.Envelope_Ack{Ack: &gwpb.ControlAck{Id: id}}}); err != nil {
		t.Fatalf("send %s to agg-1: %v", id, err)
	}
	waitFor(t, 5*time.Second, "agg-1 receives "+id, func() bool {
		for _, m := range agg.rec.messages() {
			if m.env.GetAck().GetId() == id {
				return true
			}
		}
		return false
	})
}

// An aggregator signs the address it is reached at with its meta.
func TestAggregatorSignsItsAddress(t *testing.T) {
	t.Parallel()
	agg, n1 := pair(t)
	m, _ := member(n1.Mesh, "agg-1")
	if got := m.Meta.GetAddr(); got != agg.Addr() || !m.Proven {
		t.Fatalf("agg-1's meta as node1 sees it: addr %q proven %v, want %q proven", got, m.Proven, agg.Addr())
	}
	// The same signed meta announced from another address is refused.
	raw := *agg.metaBytes.Load()
	if err := n1.judgeAlive("agg-1", net.IPv4(127, 0, 0, 66), 7946, raw); err == nil || !strings.Contains(err.Error(), refusedTakeover) {
		t.Errorf("agg-1's meta at another address: %v, want refused as %s", err, refusedTakeover)
	}
	if err := n1.judgeAlive("agg-2", net.IPv4(127, 0, 0, 66), 7946, raw); err == nil {
		t.Error("agg-1's meta under another name was taken")
	}
}

// One alive message about the aggregator with the maximal incarnation and
// an empty meta, sent to an agent: memberlist would take it, drop the
// aggregator's role at every member it reaches, and ignore the
// aggregator's refutation (wrapped to 0). It is refused.
func TestAliveWithEmptyMetaForAggregatorRefused(t *testing.T) {
	t.Parallel()
	agg, n1 := pair(t)
	r := crafter(t)
	before := refusedAliveTotal(n1.Mesh)
	metas := [][]byte{nil, mustMeta(t, &gwpb.Meta{Role: gwpb.Role_ROLE_AGENT}), mustMeta(t, &gwpb.Meta{Role: gwpb.Role_ROLE_AGGREGATOR})}
	for _, meta := range metas {
		if err := r.Send(n1.Addr(), rogue.Alive("agg-1", agg.Addr(), rogue.MaxIncarnation, meta)); err != nil {
			t.Fatal(err)
		}
	}
	// Each is counted as it is refused, before memberlist's table could
	// take it: once all are, what node1 holds is what they left.
	waitFor(t, 5*time.Second, "the forged alive messages refused", func() bool {
		return refusedAliveTotal(n1.Mesh) >= before+uint64(len(metas))
	})
	if m, _ := member(n1.Mesh, "agg-1"); !m.Proven || m.Role != aggr || len(n1.AliveMembers(aggr)) != 1 {
		t.Fatalf("node1 no longer takes agg-1 for an aggregator: %+v, aggregators %v", m, n1.AliveMembers(aggr))
	}
	if !contains(n1.logs.String(), "refused a member's alive message", "reason=aggregator_meta", "node=agg-1") {
		t.Error("the refusal is not logged")
	}
	delivered(t, n1, agg, "after-empty-meta")
}

// The aggregator's address taken over: a dead message claimed from the
// aggregator itself (memberlist records it left: an address anyone may
// then reclaim), then its copied signed meta announced from the rogue's
// address. node1 keeps the real address and its messages reach the real
// aggregator.
func TestAggregatorAddressTakeoverRefused(t *testing.T) {
	t.Parallel()
	agg, n1 := pair(t)
	r := crafter(t)
	stolen := *agg.metaBytes.Load()
	if err := r.Send(n1.Addr(), rogue.Dead("agg-1", "agg-1", rogue.MaxIncarnation)); err != nil {
		t.Fatal(err)
	}
	// (memberlist tells its delegates no "left": the mesh records it dead)
	waitFor(t, 5*time.Second, "node1's memberlist holds agg-1 gone", func() bool { return statusOf(n1.Mesh, "agg-1") != StatusAlive })
	before := refusedAlive(n1.Mesh, refusedTakeover)
	if err := r.Send(n1.Addr(), rogue.Alive("agg-1", "127.0.0.1:9", rogue.MaxIncarnation, stolen)); err != nil {
		t.Fatal(err)
	}
	// Counted as it is refused, before memberlist's table could take it.
	waitFor(t, 5*time.Second, "the takeover refused", func() bool { return refusedAlive(n1.Mesh, refusedTakeover) > before })
	if m, _ := member(n1.Mesh, "agg-1"); m.Addr != agg.Addr() {
		t.Fatalf("node1 has agg-1 at the rogue's address: %+v", m)
	}
	if !contains(n1.logs.String(), "refused a member's alive message", "reason=address_takeover", "node=agg-1") {
		t.Error("the takeover's refusal is not logged")
	}
	books := n1.Aggregators()
	if len(books) != 1 || books[0].Addr != agg.Addr() {
		t.Fatalf("node1's book: %+v", books)
	}
	delivered(t, n1, agg, "after-takeover")
}

// A dead message about the aggregator with the maximal incarnation: every
// memberlist that hears it holds the aggregator dead (its refutation wraps
// to 0). The agent keeps it in its book, says so once, and its messages
// still reach it.
func TestAggregatorLostInGossipStillReached(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	agg := start(t, "agg-1", aggr, nil)
	n1 := start(t, "node1", agent, func(o *Options) { o.Config.Join = []string{agg.Addr()}; o.Registry = reg })
	waitFor(t, 5*time.Second, "agg-1 in node1's book", func() bool { return len(n1.Aggregators()) == 1 && sees(agg.Mesh, "node1") })
	r := crafter(t)
	if err := r.Send(n1.Addr(), rogue.Dead("agg-1", "rogue", rogue.MaxIncarnation)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "node1's memberlist holds agg-1 dead", func() bool { return statusOf(n1.Mesh, "agg-1") == StatusDead })
	books := n1.Aggregators()
	if len(books) != 1 || books[0].Name != "agg-1" || books[0].Gossip != StatusDead || !books[0].Lost(time.Now()) {
		t.Fatalf("node1's book: %+v, want agg-1 lost by gossip", books)
	}
	delivered(t, n1, agg, "after-dead")
	if b := n1.Aggregators()[0]; b.LastContact.IsZero() {
		t.Errorf("a delivered message is not recorded as a contact: %+v", b)
	}
	if n := strings.Count(n1.logs.String(), "aggregator lost by gossip"); n != 1 {
		t.Errorf("%d lines say agg-1 is lost by gossip, want 1", n)
	}
	want := `
# HELP gracewatch_mesh_aggregators Aggregators this member knows from their signed metas, by what gossip says: alive, or lost (dead or left in memberlist's word, or its proof expired); a lost one is still reached directly.
# TYPE gracewatch_mesh_aggregators gauge
gracewatch_mesh_aggregators{gossip="alive"} 0
gracewatch_mesh_aggregators{gossip="lost"} 1
`
	if err := promtest.GatherAndCompare(reg, strings.NewReader(want), "gracewatch_mesh_aggregators"); err != nil {
		t.Error(err)
	}
}

// An alive message about this aggregator with a meta it did not publish
// is refused: memberlist would refute it with an incarnation that wraps.
func TestAliveAboutSelfWithForeignMetaRefused(t *testing.T) {
	t.Parallel()
	agg, _ := pair(t)
	r := crafter(t)
	before := refusedAlive(agg.Mesh, refusedSelf)
	if err := r.Send(agg.Addr(), rogue.Alive("agg-1", agg.Addr(), rogue.MaxIncarnation, nil)); err != nil {
		t.Fatal(err)
	}
	// Counted as it is refused, which is before memberlist would refute it.
	waitFor(t, 5*time.Second, "the forged alive message refused", func() bool { return refusedAlive(agg.Mesh, refusedSelf) > before })
	if strings.Contains(agg.logs.String(), "Refuting an alive message") {
		t.Fatalf("the aggregator refuted the forged alive message:\n%s", agg.logs.String())
	}
	if !contains(agg.logs.String(), "reason=self_meta") {
		t.Error("the refusal is not logged")
	}
}

// 55,000 alive messages with invented names (in compound packets) fill no
// more than the member table's bound; the refusals make a bounded number
// of log lines.
func TestMemberTableBounded(t *testing.T) {
	t.Parallel()
	const max = 200
	agg := start(t, "agg-1", aggr, func(o *Options) { o.MaxMembers = max })
	r := crafter(t)
	meta := mustMeta(t, &gwpb.Meta{Role: gwpb.Role_ROLE_AGENT, State: gwpb.State_STATE_UP})
	const total = 55000
	for i := 0; i < total; i += 100 {
		var msgs [][]byte
		for j := i; j < i+100; j++ {
			msgs = append(msgs, rogue.Alive(fmt.Sprintf("invented%05d", j), fmt.Sprintf("127.0.%d.%d:7946", 100+j/250%100, 1+j%250), 1, meta))
		}
		if err := r.Send(agg.Addr(), rogue.Compound(msgs...)); err != nil {
			t.Fatal(err)
		}
		if i%5000 == 0 {
			time.Sleep(20 * time.Millisecond) // not a wait: pacing the flood, so that the socket's buffer holds it
		}
	}
	waitFor(t, 10*time.Second, "the table full", func() bool { return agg.NumMembers() >= max })
	// A genuine message after the flood, which memberlist handles only when
	// no alive message waits: then every one of the flood that arrived has
	// been handled.
	packetMarker(t, r, agg, "after the flood")
	agg.mu.Lock()
	kept := len(agg.members)
	agg.mu.Unlock()
	if n := agg.NumMembers(); n > max || kept > max {
		t.Errorf("memberlist keeps %d members, the mesh %d; bound %d", n, kept, max)
	}
	if got := agg.refused.n[1].Load(); got == 0 {
		t.Error("no refusal counted as table_full")
	}
	lines := strings.Count(agg.logs.String(), "refused a member's alive message")
	t.Logf("%d members kept of %d invented; %d refusals counted, %d log lines", kept, total, agg.refused.n[1].Load(), lines)
	if lines > 3*20 {
		t.Errorf("%d log lines for the refusals, want a bounded few", lines)
	}
}

func TestMetaRole(t *testing.T) {
	for _, tc := range []struct {
		meta *gwpb.Meta
		want gwpb.Role
	}{
		{&gwpb.Meta{Role: gwpb.Role_ROLE_AGGREGATOR, Reason: "x"}, gwpb.Role_ROLE_AGGREGATOR},
		{&gwpb.Meta{Role: gwpb.Role_ROLE_AGENT, Seq: 9}, gwpb.Role_ROLE_AGENT},
		{&gwpb.Meta{Seq: 3}, gwpb.Role_ROLE_UNSPECIFIED},
	} {
		if got := metaRole(mustMeta(t, tc.meta)); got != tc.want {
			t.Errorf("metaRole(%v) = %v, want %v", tc.meta, got, tc.want)
		}
	}
	for _, junk := range [][]byte{nil, {0xff}, {0x10}, {0x10, 0xff}} {
		if got := metaRole(junk); got != gwpb.Role_ROLE_UNSPECIFIED {
			t.Errorf("metaRole(%x) = %v", junk, got)
		}
	}
}

// The book drops an aggregator that gossip lost only when neither a valid
// proof nor a direct contact has been seen for bookKeep, and never a seed.
func TestBookUpkeep(t *testing.T) {
	logs := &capture{}
	m := &Mesh{name: "node1", log: slog.New(logs), book: map[string]*bookEntry{}}
	t0 := time.Unix(1_000_000, 0)
	add := func(name string, seed bool) *bookEntry {
		e := &bookEntry{AggregatorRef: AggregatorRef{Name: name, Addr: "127.0.0.1:1", Gossip: StatusDead, SignedAt: t0, Seed: seed}}
		m.book[name] = e
		return e
	}
	add("gone", false)
	add("seed", true)
	add("contacted", false).LastContact = t0.Add(aggregatorProofValidity + bookKeep/2)
	m.upkeepBook(t0.Add(time.Minute))
	if len(m.book) != 3 {
		t.Fatalf("dropped too early: %v", m.Aggregators())
	}
	m.upkeepBook(t0.Add(aggregatorProofValidity + bookKeep + time.Second))
	var names []string
	for _, a := range m.Aggregators() {
		names = append(names, a.Name)
	}
	if got := strings.Join(names, ","); got != "contacted,seed" {
		t.Errorf("book after bookKeep without contact: %s, want contacted,seed", got)
	}
	m.upkeepBook(t0.Add(aggregatorProofValidity + 2*bookKeep + time.Second))
	if got := m.Aggregators(); len(got) != 1 || got[0].Name != "seed" {
		t.Errorf("book: %+v, want the seed only", got)
	}
}

// One peer holds at most maxStreamsPerPeer inbound streams at once: past
// it a connection is closed at once, so that a member cannot make this one
// read many maximal messages at a time.
func TestInboundStreamsPerPeerBounded(t *testing.T) {
	t.Parallel()
	agg := start(t, "agg-1", aggr, nil)
	const n = 3 * maxStreamsPerPeer
	closedAt := make(chan time.Duration, n)
	begin := time.Now()
	for range n {
		c, err := net.Dial("tcp", agg.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		go func() {
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			c.Read(make([]byte, 1))
			closedAt <- time.Since(begin)
		}()
	}
	quick := 0
	for range n {
		if d := <-closedAt; d < 300*time.Millisecond {
			quick++
		}
	}
	if want := n - maxStreamsPerPeer; quick != want {
		t.Errorf("%d of %d idle streams closed at once, want %d (the rest wait for memberlist's timeout)", quick, n, want)
	}
	if got := agg.refused.n[7].Load(); got != uint64(n-maxStreamsPerPeer) {
		t.Errorf("refused streams_per_peer %d, want %d", got, n-maxStreamsPerPeer)
	}
	// The slots are given back: a real message passes.
	n1 := start(t, "node1", agent, joining(agg.Addr()))
	waitFor(t, 5*time.Second, "node1 joined", func() bool { return sees(agg.Mesh, "node1") })
	_ = n1
}
