package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/api"
)

// TestWriteGrace: `aggregator grace` prints the window, the distribution
// (with the teardowns and nodes it counts as less), the candidates' table,
// the floor, the recommendation with its evidence (what drives it, the
// nodes that back it, those not followed), the top lists and the notes; a
// thin history says why it recommends nothing.
func TestWriteGrace(t *testing.T) {
	at := time.Date(2026, 12, 4, 15, 0, 0, 0, time.UTC)
	full := api.GraceAdvice{From: at.Add(-30 * 24 * time.Hour), To: at, Records: 1206, Running: 1, NodesSeen: 45,
		Durations: api.GraceDistribution{Count: 1206, P50: 31, P99: 60, P999: 200, Max: 200, NodeCap: 60, Bound: 200,
			Above:  []api.GraceEvidence{{Node: "n3", Job: "5", User: "carol", Command: "cat", Duration: 400, Outcome: "hung"}},
			Capped: []api.GraceNodeCount{{Node: "evil", Records: 86400}}},
		Candidates: []api.GraceCandidate{{G: 60, Overdue: 4, Nodes: 3, PlannedWrong: 750, FalseDrains: 1},
			{G: 120, InForce: true, Overdue: 3, Nodes: 3, PlannedWrong: 540, FalseDrains: 1}},
		KillPathFloor: &api.GraceFloor{Seconds: 95, Node: "n1", Path: "slurm: KillWait 30s + UnkillableStepTimeout 65s", Backing: 12,
			Nodes: []string{"n7", "n1"}, Above: []api.GraceNodeFloor{{Node: "evil", Seconds: 86400, Path: "slurm: lies"}}},
		Recommendation: &api.GraceRecommendation{G: 95, Driver: "floor", Caught: 2, Signalled: 1, FalseDrains: 1, Backing: 2, Nodes: []string{"n2", "n5"},
			LongestSelfEnded: &api.GraceEvidence{Node: "n5", Job: "3", User: "bob", Command: "sync", Duration: 90, Outcome: "exited"},
			Unbacked:         []api.GraceEvidence{{Node: "n9", Job: "8", User: "eve", Command: "sleep", Duration: 300, Outcome: "clean"}},
			CaughtExamples:   []api.GraceEvidence{{Node: "n3", Job: "5", User: "carol", Command: "cat", Cause: "fuse.hangfs /scratch", Duration: 400, Outcome: "hung"}}},
		TopG: 95, TopUsers: []api.GraceTop{{Name: "carol", Long: 1, Hung: 1}}, TopCommands: []api.GraceTop{{Name: "cat", Long: 1, Hung: 1}},
		Notes: []string{"1 teardowns still run"}, History: api.GraceHistory{Records: 1206, Bytes: 70000}}
	for _, tc := range []struct {
		name string
		ga   api.GraceAdvice
		want []string
	}{
		{"full", full, []string{
			"window 2026-11-04T15:00:00Z to 2026-12-04T15:00:00Z, all nodes: 1206 teardowns released, 1 running, on 45 nodes\n",
			"durations: p50 31s, p99 1m0s, p99.9 3m20s, max 3m20s\n",
			"  counted as 3m20s, the longest that 2 nodes reached: n3 job 5, hung 6m40s\n",
			"  counted as 60 teardowns (twice the median node's): evil sent 86400\n",
			"kill-path floor: 1m35s (n1: slurm: KillWait 30s + UnkillableStepTimeout 65s); 12 nodes (n7, n1, …) report at least it\n",
			"  not followed (fewer nodes report it): evil 24h0m0s (slurm: lies)\n",
			"G  OVERDUE  NODES DRAINED  PLANNED WRONG  FALSE DRAINS  UNKNOWN",
			"2m0s (in force)        3              3           9m0s             1        0",
			"recommended G: 1m35s, driven by the kill-path floor\n",
			"  longest that ended by itself on 2 nodes or more: n5 job 3, user bob, sync, 1m30s; 2 nodes (n2, n5) reach it\n",
			"  not followed (no other node reached it): n9 job 8, user eve, sleep, clean 5m0s\n",
			"it drains 2 really hung teardowns, misses 0 hung ones no G separates, drains 1 signalled ones of unknown length, 0 unreported, 1 that ended by themselves\n",
			"caught: n3 job 5, user carol, cat, hung 6m40s fuse.hangfs /scratch\n",
			"top users (over 1m35s, or hung): carol 1 long, 1 hung;\n",
			"top commands (over 1m35s, or hung): cat 1 long, 1 hung;\n",
			"note: 1 teardowns still run\n",
			"history: 1206 records, 70000 bytes\n"}},
		{"thin", api.GraceAdvice{Nodes: "n[3-4]", Records: 2, Durations: api.GraceDistribution{Count: 2, P50: 1, P99: 2, P999: 2, Max: 2},
			Thin: "too thin: 2 released teardowns in the window, the advisor recommends from 50"},
			[]string{"n[3-4]: 2 teardowns released", "kill-path floor: unknown (fewer than 2 nodes sent one)",
				"no recommendation: too thin: 2 released teardowns in the window, the advisor recommends from 50\n"}},
	} {
		var b strings.Builder
		writeGrace(&b, tc.ga)
		for _, want := range tc.want {
			if !strings.Contains(b.String(), want) {
				t.Errorf("%s: printed\n%s\nwant %q in it", tc.name, b.String(), want)
			}
		}
		if tc.name == "thin" && strings.Contains(b.String(), "recommended G") {
			t.Errorf("thin: recommends:\n%s", b.String())
		}
	}
}
