package agent

import (
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

func TestMetaOf(t *testing.T) {
	since := time.UnixMilli(1_800_000_000_000)
	d1, d2 := since.Add(time.Minute), since.Add(2*time.Minute)
	ended := since
	st := api.Status{Node: "n1", State: api.StateTeardown, Since: since, FreeAt: &d2, Seq: 42, Incarnation: 3,
		Jobs: []api.Job{
			{ID: "a", Phase: api.PhaseTeardown, Deadline: &d1, Ended: &ended, Grace: "1m0s"},
			{ID: "b", Phase: api.PhaseOverdue, Deadline: &d2, Ended: &ended, Grace: "2m0s"},
			{ID: "c", Phase: api.PhaseRunning},
		}}
	m := metaOf(st)
	if m.State != gwpb.State_STATE_TEARDOWN || m.FreeAtMs != d2.UnixMilli() || m.DeadlineMs != d2.UnixMilli() ||
		m.Seq != 42 || m.Incarnation != 3 || m.SinceMs != since.UnixMilli() || m.Role != gwpb.Role_ROLE_AGENT {
		t.Fatalf("meta %v", m)
	}
	b, err := mesh.EncodeMeta(m)
	if err != nil || len(b) > 64 {
		t.Fatalf("encoded teardown meta: %d bytes, %v (want within 64)", len(b), err)
	}
	tds := teardownsOf(st)
	if len(tds) != 2 || tds[0].Job != "a" || tds[0].GraceMs != 60000 || tds[1].DeadlineMs != d2.UnixMilli() {
		t.Fatalf("teardowns %v", tds)
	}
	down := metaOf(api.Status{State: api.StateDown, Reason: "job b teardown exceeded grace 2m0s", Since: since})
	if down.State != gwpb.State_STATE_DOWN || down.FreeAtMs != 0 || down.Reason == "" {
		t.Fatalf("down meta %v", down)
	}
}

func TestGossipedMetaLeavesSinceOutWhileUp(t *testing.T) {
	since := time.UnixMilli(1_800_000_000_000)
	up := api.Status{Node: "n1", State: api.StateUp, Since: since, Seq: 42, Incarnation: 3}
	g := gossipedMeta(up)
	if g.SinceMs != 0 || g.Seq != 42 || g.Incarnation != 3 || g.State != gwpb.State_STATE_UP {
		t.Fatalf("gossiped up meta %v: want since_ms 0, seq and incarnation kept", g)
	}
	if d := metaOf(up); d.SinceMs != since.UnixMilli() {
		t.Fatalf("direct meta %v lost since_ms", d)
	}
	gb, _ := mesh.EncodeMeta(g)
	db, _ := mesh.EncodeMeta(metaOf(up))
	if len(gb) >= len(db) {
		t.Fatalf("gossiped up meta %d bytes, direct %d: want smaller", len(gb), len(db))
	}
	down := api.Status{Node: "n1", State: api.StateDown, Reason: "hung", Since: since, Seq: 43, Incarnation: 3}
	if g := gossipedMeta(down); g.SinceMs != since.UnixMilli() {
		t.Fatalf("gossiped down meta %v: since_ms must stay", g)
	}
}
