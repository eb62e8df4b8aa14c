package mesh

import (
	"bytes"
	"compress/lzw"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/proto/gwpb"
	"github.com/hashicorp/go-msgpack/v2/codec"
)

// pushNodeState and pushPullHeader are memberlist v0.7.0's (net.go), field
// for field: msgpack encodes a struct as a map of its field names, so the
// names are part of the bytes.
type pushNodeState struct {
	Name        string
	Addr        []byte
	Port        uint16
	Meta        []byte
	Incarnation uint32
	State       uint8
	Vsn         []uint8
}

type pushPullHeader struct {
	Nodes        int
	UserStateLen int
	Join         bool
}

// pushPullSize is the size of one push-pull's payload as memberlist v0.7.0
// sends it with compression on and no encryption (sendLocalState, then
// rawSendMsgStream's compressPayload): a type byte, the msgpack header, the
// msgpack node states, all LZW-compressed (LSB, 8-bit literals) and wrapped
// in a msgpack compress message.
func pushPullSize(tb testing.TB, nodes []pushNodeState) int {
	tb.Helper()
	var raw bytes.Buffer
	raw.WriteByte(6) // pushPullMsg
	enc := codec.NewEncoder(&raw, &codec.MsgpackHandle{})
	if err := enc.Encode(&pushPullHeader{Nodes: len(nodes)}); err != nil {
		tb.Fatal(err)
	}
	for i := range nodes {
		if err := enc.Encode(&nodes[i]); err != nil {
			tb.Fatal(err)
		}
	}
	var z bytes.Buffer
	w := lzw.NewWriter(&z, lzw.LSB, 8)
	if _, err := w.Write(raw.Bytes()); err != nil {
		tb.Fatal(err)
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	var out bytes.Buffer
	out.WriteByte(9) // compressMsg
	c := struct {
		Algo int
		Buf  []byte
	}{0, z.Bytes()}
	if err := codec.NewEncoder(&out, &codec.MsgpackHandle{}).Encode(&c); err != nil {
		tb.Fatal(err)
	}
	return out.Len()
}

// metaVariant is one way to fill an up agent's meta.
type metaVariant struct {
	name string
	meta func(r *rand.Rand, now time.Time) *gwpb.Meta
	// macBytes > 0 appends a proof trailer of that many random bytes to
	// every agent's meta (what an HMAC per node would cost).
	macBytes int
	// aggregators > 0 makes that many members aggregators with signed
	// metas (node restriction as built: agents' metas carry no proof).
	aggregators int
}

// upMetaVariants are the up-node metas BenchmarkPushPullBytes compares.
// Values vary from node to node as in a cluster that has run for a while:
// agent starts 1–20, state changes 1–5,000, last change within a week.
var upMetaVariants = []metaVariant{
	{"bare", nil, 0, 0},
	{"same-on-every-node", func(*rand.Rand, time.Time) *gwpb.Meta {
		return &gwpb.Meta{Incarnation: 1, Seq: 1, State: gwpb.State_STATE_UP}
	}, 0, 0},
	{"no-seq", func(r *rand.Rand, _ time.Time) *gwpb.Meta {
		return &gwpb.Meta{Incarnation: 1 + r.Uint64N(20), State: gwpb.State_STATE_UP}
	}, 0, 0},
	{"gossiped", gossipedMeta, 0, 0}, // agent/meshlink gossipedMeta: no since while up
	{"with-since-ms", func(r *rand.Rand, now time.Time) *gwpb.Meta { // the meta before since was dropped
		return &gwpb.Meta{Incarnation: 1 + r.Uint64N(20), Seq: 1 + r.Uint64N(5000), State: gwpb.State_STATE_UP,
			SinceMs: now.Add(-time.Duration(r.Int64N(int64(7 * 24 * time.Hour)))).UnixMilli()}
	}, 0, 0},
	// Node restriction: 3 aggregators sign their metas, with agents'
	// metas as before and as built (a node that proves itself gossips no
	// incarnation nor seq while up), and the alternative that was measured
	// and not built (a 16-byte HMAC in every agent's meta).
	{"gossiped+3-signed-aggregators", gossipedMeta, 0, 3},
	{"proving-nodes+3-signed-aggregators", func(*rand.Rand, time.Time) *gwpb.Meta { // agent/meshlink gossipedMeta with a node key
		return &gwpb.Meta{State: gwpb.State_STATE_UP}
	}, 0, 3},
	{"gossiped+16-byte-node-mac", gossipedMeta, 16, 0},
}

func gossipedMeta(r *rand.Rand, _ time.Time) *gwpb.Meta {
	return &gwpb.Meta{Incarnation: 1 + r.Uint64N(20), Seq: 1 + r.Uint64N(5000), State: gwpb.State_STATE_UP}
}

// swarmStates are n up agents' node states as a member of the benchmark
// swarm (swarmAddr's addresses, names "node0000".., memberlist's protocol
// versions) holds them, with metas from v (nil: no meta).
func swarmStates(tb testing.TB, n int, v metaVariant) []pushNodeState {
	tb.Helper()
	r := rand.New(rand.NewPCG(1, uint64(n)))
	now := time.UnixMilli(1_800_000_000_000)
	nodes := make([]pushNodeState, n)
	for i := range nodes {
		ap := netip.MustParseAddrPort(swarmAddr(i, 17946))
		a := ap.Addr().As4()
		nodes[i] = pushNodeState{Name: fmt.Sprintf("node%04d", i), Addr: a[:], Port: ap.Port(), Incarnation: 1,
			State: 0, Vsn: []uint8{1, 5, 2, 0, 0, 0}}
		if v.meta != nil {
			role := gwpb.Role_ROLE_AGENT
			if i < v.aggregators {
				role = gwpb.Role_ROLE_AGGREGATOR
			}
			b, err := EncodeMeta(initialMeta(v.meta(r, now), role))
			if err != nil {
				tb.Fatal(err)
			}
			switch {
			case role == gwpb.Role_ROLE_AGGREGATOR:
				g := newGuard(benchAggKeys(tb), false)
				b = g.sealMeta(nodes[i].Name, role, b, now)
			case v.macBytes > 0:
				mac := make([]byte, v.macBytes)
				for j := range mac {
					mac[j] = byte(r.Uint32())
				}
				b = appendProof(b, mac)
			}
			nodes[i].Meta = b
		}
	}
	return nodes
}

// BenchmarkPushPullBytes reports the bytes of one push-pull, one way, per
// node, for each meta variant, and the steady gossip bytes per member and
// second that gives with memberlist's LAN timing: udpRate (the probes'
// UDP bytes per member and second, measured by BenchmarkGossipBytes: a
// ping and an ack a second, 92 B/s, independent of N) plus one push-pull
// (both ways) per member per pushPullPeriod(n). The encoding is memberlist's
// own (see pushPullSize); BenchmarkGossipBytes's measured push-pulls at 200
// and 400 members agree with it within 5 %. It runs in milliseconds:
//
//	go test -run '^$' -bench PushPullBytes -benchtime 1x ./mesh/
func BenchmarkPushPullBytes(b *testing.B) {
	const udpRate = 92.0 // B/member/s, BenchmarkGossipBytes at 200 and 400
	label := float64(2 + len(DefaultLabel))
	for _, n := range []int{200, 400, 1000, 10000} {
		bare := float64(pushPullSize(b, swarmStates(b, n, upMetaVariants[0])))
		steady := func(oneWay float64, withLabel bool) float64 {
			ppRate := 2 * oneWay / pushPullPeriod(n).Seconds()
			if withLabel {
				return udpRate + 2*label + ppRate // two packets a second carry the label
			}
			return udpRate + ppRate
		}
		for _, v := range upMetaVariants {
			b.Run(fmt.Sprintf("members=%d/meta=%s", n, v.name), func(b *testing.B) {
				var size int
				for range b.N {
					size = pushPullSize(b, swarmStates(b, n, v))
				}
				s := float64(size)
				b.ReportMetric(s/float64(n), "B/node")
				b.ReportMetric(steady(s, true), "B/member/s")
				b.ReportMetric(steady(s, true)/steady(bare, false), "ratio")
				b.ReportMetric(steady(s, false)/steady(bare, false), "ratio-nolabel")
			})
		}
	}
}

// TestPushPullSizeGrowsWithMetaEntropy checks pushPullSize's premise and
// gossipedMeta's reason: a meta that is the same on every node compresses
// to almost nothing, and dropping since_ms from up metas makes a 1,000-node
// push-pull smaller by a quarter at least.
func TestPushPullSizeGrowsWithMetaEntropy(t *testing.T) {
	size := map[string]int{}
	for _, v := range upMetaVariants {
		size[v.name] = pushPullSize(t, swarmStates(t, 1000, v))
	}
	t.Logf("one push-pull at 1,000 members: %v", size)
	if same, bare := size["same-on-every-node"], size["bare"]; float64(same) > 1.25*float64(bare) {
		t.Errorf("identical metas: %d bytes against %d bare: LZW should share them", same, bare)
	}
	if g, old := size["gossiped"], size["with-since-ms"]; float64(g) > 0.75*float64(old) {
		t.Errorf("gossiped up meta: %d bytes against %d with since_ms: want a quarter less at least", g, old)
	}
	if !(size["bare"] < size["no-seq"] && size["no-seq"] < size["gossiped"] && size["gossiped"] < size["with-since-ms"]) {
		t.Errorf("sizes not ordered by entropy: %v", size)
	}
}

func benchAggKeys(tb testing.TB) *Keys {
	k, err := AggregatorKeys([][]byte{testSite})
	if err != nil {
		tb.Fatal(err)
	}
	return k
}
