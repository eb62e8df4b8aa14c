package mesh

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/proto/gwpb"
	"google.golang.org/protobuf/proto"
)

// BenchmarkOpenEnvelope is the cost of node restriction at the receiver:
// decoding and checking one direct message, against decoding it alone
// (unsigned, allow_unsigned). A state update is what an aggregator checks
// on every state change of every node (HMAC-SHA256 under the node key,
// derived again from the site key: two HMACs per site key); a Control is
// what an agent checks (Ed25519).
//
//	go test -run '^$' -bench OpenEnvelope -benchmem ./mesh/
func BenchmarkOpenEnvelope(b *testing.B) {
	now := time.Now()
	aggK := testKeys(b, "agg-1", aggr)
	site2, _ := AggregatorKeys([][]byte{[]byte(strings.Repeat("n", 32)), testSite})
	nodeK := testKeys(b, "node0042", agent)
	detail := []byte(`{"schema":1,"processes":[` + strings.Repeat(`{"pid":5814,"comm":"a.out","state":"D","wchan":"request_wait_answer"},`, 60) + `{}]}`)
	update := func(reportBytes bool) *gwpb.Envelope {
		u := &gwpb.StateUpdate{Meta: &gwpb.Meta{Schema: 1, Role: agent, Incarnation: 3, Seq: 4711, State: gwpb.State_STATE_DOWN,
			SinceMs: now.UnixMilli(), DeadlineMs: now.UnixMilli(), Reason: "job 41 not ended by its deadline (E + 120s): 1 unkillable (pid 5814 a.out, D in request_wait_answer, fuse /scratch)"},
			Teardowns: []*gwpb.Teardown{{Job: "41", Phase: "overdue", EndedMs: now.UnixMilli(), DeadlineMs: now.UnixMilli(), GraceMs: 120000}}, StartedMs: now.UnixMilli()}
		if reportBytes {
			u.Reports = []*gwpb.Report{{Job: "41", Stage: "after-escalation", Outcome: "hung", Summary: "1 unkillable", DetailJson: detail}}
		}
		return &gwpb.Envelope{Schema: 1, From: "node0042", SentMs: now.UnixMilli(), Body: &gwpb.Envelope_State{State: u}}
	}
	ctrl := &gwpb.Envelope{Schema: 1, From: "agg-1", To: "node0042", SentMs: now.UnixMilli(),
		Body: &gwpb.Envelope_Control{Control: &gwpb.Control{Id: "0123456789abcdef01234567", Action: gwpb.Action_ACTION_DRAIN, Reason: "maintenance", By: "admin"}}}
	cases := []struct {
		name  string
		env   *gwpb.Envelope
		seal  *Keys
		open  *Keys
		self  string
		fresh bool // a new signature per iteration (the replay cache refuses repeats)
	}{
		{"state-update/unsigned", update(false), nil, nil, "agg-1", false},
		{"state-update/node-hmac", update(false), nodeK, aggK, "agg-1", false},
		{"state-update/node-hmac-2-site-keys", update(false), nodeK, site2, "agg-1", false},
		{"state-update+8KB-report/unsigned", update(true), nil, nil, "agg-1", false},
		{"state-update+8KB-report/node-hmac", update(true), nodeK, aggK, "agg-1", false},
		{"control/unsigned", ctrl, nil, nil, "node0042", false},
		{"control/ed25519", ctrl, aggK, nodeK, "node0042", true},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			g := newGuard(c.open, c.open == nil)
			raws := make([][]byte, 1)
			if c.fresh {
				raws = make([][]byte, b.N)
			}
			for i := range raws {
				e := proto.CloneOf(c.env)
				e.SentMs = now.UnixMilli() + int64(i%1000)
				e.Schema = uint32(1 + i/1000) // a different message each time
				raws[i] = forge(b, e, c.seal)
			}
			b.SetBytes(int64(len(raws[0])))
			b.ResetTimer()
			for i := range b.N {
				if _, err := g.openEnvelope(c.self, raws[i%len(raws)], now); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSealEnvelope is the sender's cost: an agent's HMAC, an
// aggregator's Ed25519 signature.
func BenchmarkSealEnvelope(b *testing.B) {
	body := []byte(fmt.Sprintf("%0600d", 0))
	for _, c := range []struct {
		name string
		k    *Keys
	}{{"node-hmac", testKeys(b, "node1", agent)}, {"ed25519", testKeys(b, "agg-1", aggr)}} {
		b.Run(c.name, func(b *testing.B) {
			g := newGuard(c.k, false)
			for range b.N {
				g.sealEnvelope(body)
			}
		})
	}
}
