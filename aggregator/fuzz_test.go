package aggregator

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"

	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/intake"
	"github.com/gracewatch/gracewatch/aggregator/view"
)

// marshal is m in the wire's bytes, a fuzz test's seed.
func marshal(m proto.Message) []byte { b, _ := proto.Marshal(m); return b }

// FuzzComputeMeta feeds arbitrary bytes through the mesh's meta decoder and
// a StateUpdate decoder into Compute: it never panics, and what it serves
// encodes as JSON and keeps the state invariants.
func FuzzComputeMeta(f *testing.F) {
	f.Add(marshal(upMeta(1, 1)), []byte(nil), int64(0))
	f.Add(marshal(teardownMeta(1, 2, at(time.Minute))), marshal(&gwpb.StateUpdate{Meta: teardownMeta(1, 2, at(time.Minute)),
		Teardowns: []*gwpb.Teardown{{Job: "1", Phase: "teardown", DeadlineMs: ms(at(30 * time.Second))}}}), int64(time.Hour))
	f.Add(marshal(downMeta(1, 3, "hung")), marshal(&gwpb.StateUpdate{Meta: downMeta(1, 3, "hung"), Reports: []*gwpb.Report{{DetailJson: []byte("{")}}}), int64(0))
	f.Add([]byte{0xff, 0x01}, []byte{0x0a, 0x02, 0x28}, int64(-1))
	f.Fuzz(func(t *testing.T, metaBytes, updateBytes []byte, offset int64) {
		in := view.NodeInput{Name: "n1", Role: view.RoleAgent, Status: mesh.StatusAlive, StatusSince: t0}
		if len(metaBytes) > 0 {
			var gossip *gwpb.Meta
			gossip, in.GossipErr = mesh.DecodeMeta(metaBytes)
			in.Gossip = intake.DecodeMeta(gossip)
			if in.GossipErr != nil {
				in.Gossip, in.Role = nil, view.RoleUnspecified
			}
		}
		var u gwpb.StateUpdate
		if proto.Unmarshal(updateBytes, &u) == nil && u.Meta != nil {
			in.Update = updateIn(&u)
			in.Direct = in.Update.Meta
		}
		now := t0.Add(time.Duration(offset))
		for _, p := range []view.Policy{defaultPolicy, {ClockSkewAllowance: time.Hour, UnreachableIsDown: true}} {
			for _, st := range []mesh.Status{mesh.StatusAlive, mesh.StatusDead} {
				in.Status = st
				nodes := view.Compute([]view.NodeInput{in}, now, p)
				if len(nodes) != 1 {
					t.Fatalf("%d nodes", len(nodes))
				}
				n := nodes[0]
				if _, err := json.Marshal(n); err != nil {
					t.Fatalf("node does not encode: %v", err)
				}
				if _, err := api.ParseState(string(n.State)); err != nil {
					t.Fatalf("state %q", n.State)
				}
				if !n.FreeAt.IsZero() && n.State != view.StateTeardown {
					t.Fatalf("free_at in state %s", n.State)
				}
				if n.Schedulable != (n.State == view.StateUp || n.State == view.StateTeardown) {
					t.Fatalf("schedulable %v in state %s", n.Schedulable, n.State)
				}
				if p.UnreachableIsDown && n.State == view.StateUnreachable {
					t.Fatal("unreachable served with unreachable_is_down")
				}
				// A deadline still to come belongs to a teardown, or to
				// an agent gone during one.
				if _, ok := view.NextEnforcement(&in, now, p); ok && n.State != view.StateTeardown && !view.Gone(st) {
					t.Fatalf("a pending deadline in state %s", n.State)
				}
			}
		}
	})
}

// FuzzBoundUpdate feeds arbitrary bytes through the StateUpdate decoder
// into intake.BoundUpdate: what it keeps is within every bound, valid where the
// input was, and bounding again changes nothing.
func FuzzBoundUpdate(f *testing.F) {
	f.Add(marshal(&gwpb.StateUpdate{Meta: downMeta(1, 3, "hung"), Reason: "hung", Reports: []*gwpb.Report{{Job: "7", DetailJson: []byte("{}")}}}))
	f.Add(marshal(&gwpb.StateUpdate{Reason: strings.Repeat("é", view.MaxUpdateReasonBytes)}))
	f.Add([]byte{0x12, 0x03, 0xe2, 0x82, 0xac})
	f.Add(marshal(observedUpdate(3, at(time.Minute))))
	f.Fuzz(func(t *testing.T, b []byte) {
		var u gwpb.StateUpdate
		if proto.Unmarshal(b, &u) != nil {
			return
		}
		c := intake.BoundUpdate(&u)
		if len(c.GetReason()) > view.MaxUpdateReasonBytes || len(c.GetMeta().GetReason()) > view.MaxUpdateReasonBytes ||
			len(c.GetTeardowns()) > intake.MaxTeardownsKept || len(c.GetReports()) > intake.MaxReportsKept {
			t.Fatalf("over a bound: %d, %d, %d, %d", len(c.GetReason()), len(c.GetMeta().GetReason()), len(c.GetTeardowns()), len(c.GetReports()))
		}
		if utf8.ValidString(u.GetReason()) && !utf8.ValidString(c.GetReason()) {
			t.Fatalf("cut made the reason invalid UTF-8: %q", c.GetReason())
		}
		for i, r := range c.GetReports() {
			if len(r.GetSummary()) > intake.MaxSummaryBytes || len(r.GetDetailJson()) > intake.MaxDetailBytes || (i < len(c.GetReports())-1 && len(r.GetDetailJson()) > 0) {
				t.Fatalf("report %d over a bound", i)
			}
		}
		if m := c.GetMode(); m != gwpb.Mode_MODE_UNSPECIFIED && m != gwpb.Mode_MODE_ENFORCE && m != gwpb.Mode_MODE_OBSERVE {
			t.Fatalf("mode %d kept", m)
		}
		// The would-be drain served from it (observe mode) is bounded too.
		if wd := view.AgentWouldDrain(intake.DecodeUpdate(c)); wd != nil && (len(wd.Reason) > view.MaxUpdateReasonBytes || len(wd.Jobs) > intake.MaxTeardownsKept ||
			(wd.At.Year() > 9999)) {
			t.Fatalf("would drain over a bound: %d bytes, %d jobs, at %v", len(wd.Reason), len(wd.Jobs), wd.At)
		}
		if again := intake.BoundUpdate(c); !proto.Equal(again, c) {
			t.Fatal("bounding twice changed the update")
		}
	})
}
