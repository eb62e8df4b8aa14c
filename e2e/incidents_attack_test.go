package e2e

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/internal/hostlist"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// Issue 26, item A, through the real mesh with node restriction: n1, a real
// agent, hung on a real FUSE mount and latched DOWN (the agents'
// auto_resume is "never"), is clean once the file system answers again,
// alone in its incident; the aggregator's [incidents] auto_resume is on.
// A rogue that is root on one compute node ("rogue": the mesh key and that
// node's own key) reports its own node DOWN for n1's file system, clean.
// The aggregator takes it (it is that node's word, sealed with its key: it
// joins n1's incident), and still does not resume n1: one other node's word
// is never enough. The decision to resume would have been logged in the
// loop round that grouped the rogue's DOWN, before the next round, which
// the test waits for.
func TestIncidentOneNodeNeverResumesAnother(t *testing.T) {
	c := newCluster(t)
	c.killWait, c.unkillableAfter = "1s", "2s"
	c.aggConf = "\n[incidents]\nauto_resume = true\n"
	agg := c.addAggregator("agg-1")
	n1 := c.addAgent("n1")
	agg.waitNode(t, "n1", "up", 15*time.Second, func(n node) bool { return n.State == "up" })
	fs := startHangfs(t, filepath.Join(c.dir, "fs"))
	if out, code := n1.cli("job", "start", "--job", "1", "--expiration", time.Now().Add(time.Hour).Format(time.RFC3339)); code != 0 {
		t.Fatalf("job start: %s", out)
	}
	n1.epilog("1", "cat", fs.file())

	mine := func() (api.Incident, bool) {
		for _, inc := range incidents(t, agg).Incidents {
			if inc.State == "open" && inc.Mountpoint == fs.mnt {
				return inc, true
			}
		}
		return api.Incident{}, false
	}
	var inc api.Incident
	waitFor(t, "n1 down, alone in an incident of its mount", 60*time.Second, func() bool {
		var ok bool
		inc, ok = mine()
		return ok && inc.Nodes == "n1"
	})
	// The file system answers again: the hung reader ends, n1's agent
	// finds it clean; it stays latched (alone, its own DOWN).
	if err := fs.stop(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "n1 clean", 60*time.Second, func() bool {
		inc, _ = mine()
		return inc.CleanCount == 1
	})
	agg.loopRound(t, c.token)
	const decided = `"msg":"incident: resuming its nodes that are clean"`
	if strings.Contains(agg.logs.String(), decided) {
		t.Fatal("n1 resumed alone in its incident")
	}

	r := c.joinRogue(t, "rogue", encodeMeta(t, &gwpb.Meta{Role: gwpb.Role_ROLE_AGENT, Incarnation: 5, Seq: 5, State: gwpb.State_STATE_DOWN,
		Reason: "hung"}, nil))
	now := time.Now()
	reason := "job 9 teardown exceeded grace 1s: 1 unkillable (pid 100 cat, D in request_wait_answer, " + inc.FSType + " " + inc.Mountpoint + ")"
	r.send("agg-1", &gwpb.Envelope{From: "rogue", Body: &gwpb.Envelope_State{State: &gwpb.StateUpdate{
		Meta: &gwpb.Meta{Schema: 1, Role: gwpb.Role_ROLE_AGENT, Incarnation: 5, Seq: 6, State: gwpb.State_STATE_DOWN, Reason: reason,
			SinceMs: now.UnixMilli()},
		Reason: reason, StartedMs: now.UnixMilli(),
		Teardowns: []*gwpb.Teardown{{Job: "9", Phase: "released", DeadlineMs: now.Add(-time.Minute).UnixMilli(), GraceMs: 1000}},
		Cause: &gwpb.Cause{Fstype: inc.FSType, Source: inc.Source, Mountpoint: inc.Mountpoint, Wchan: "request_wait_answer",
			Class: "unkillable", Unkillable: 1, ExamplePid: 100, ExampleComm: "cat", Job: "9"},
		Clean: true,
	}}}, true)
	agg.loopRound(t, c.token)

	inc, _ = mine()
	names, err := hostlist.Expand(inc.Nodes)
	if err != nil || !slices.Equal(names, []string{"n1", "rogue"}) || inc.CleanCount != 2 {
		t.Fatalf("incident %+v: want the rogue's word taken, n1 and rogue in it, both clean", inc)
	}
	if strings.Contains(agg.logs.String(), decided) {
		t.Error("the aggregator resumed n1 on one other node's word")
	}
	if st := n1.status(); st.State != "down" {
		t.Errorf("n1's agent is %s (%s), want down", st.State, st.Reason)
	}
	if nd, _ := agg.node(t, "n1"); nd.State != "down" {
		t.Errorf("n1 served %s, want down", nd.State)
	}
	t.Logf("incident %d: %s, clean %s; n1 still down", inc.ID, inc.Nodes, inc.Clean)
}
