package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/api"
)

// TestWriteGrace: `aggregator grace` prints the window, the distribution,
// the candidates' table, the floor, the recommendation with its evidence,
// the top lists and the notes; a thin history says why it recommends
// nothing.
func TestWriteGrace(t *testing.T) {
	at := time.Date(2026, 12, 4, 15, 0, 0, 0, time.UTC)
	full := api.GraceAdvice{From: at.Add(-30 * 24 * time.Hour), To: at, Records: 1206, Running: 1, NodesSeen: 45,
		Durations: api.GraceDistribution{Count: 1206, P50: 31, P99: 60, P999: 200, Max: 400},
		Candidates: []api.GraceCandidate{{G: 60, Overdue: 4, Nodes: 3, PlannedWrong: 750, FalseDrains: 1},
			{G: 120, InForce: true, Overdue: 3, Nodes: 3, PlannedWrong: 540, FalseDrains: 1}},
		KillPathFloor: &api.GraceFloor{Seconds: 95, Node: "n1", Path: "slurm: KillWait 30s + UnkillableStepTimeout 65s"},
		Recommendation: &api.GraceRecommendation{G: 95, Caught: 2, Signalled: 1,
			LongestSelfEnded: &api.GraceEvidence{Node: "n2", Job: "3", User: "bob", Command: "sync", Duration: 90, Outcome: "exited"},
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
			"durations: p50 31s, p99 1m0s, p99.9 3m20s, max 6m40s\n",
			"kill-path floor: 1m35s (n1: slurm: KillWait 30s + UnkillableStepTimeout 65s)\n",
			"G  OVERDUE  NODES DRAINED  PLANNED WRONG  FALSE DRAINS  UNKNOWN",
			"2m0s (in force)        3              3           9m0s             1        0",
			"recommended G: 1m35s (longest that ended by itself: n2 job 3, user bob, sync, 1m30s)\n",
			"it drains 2 really hung teardowns, misses 0 hung ones no G separates, drains 1 signalled ones of unknown length, 0 unreported\n",
			"caught: n3 job 5, user carol, cat, hung 6m40s fuse.hangfs /scratch\n",
			"top users (over 1m35s, or hung): carol 1 long, 1 hung;\n",
			"top commands (over 1m35s, or hung): cat 1 long, 1 hung;\n",
			"note: 1 teardowns still run\n",
			"history: 1206 records, 70000 bytes\n"}},
		{"thin", api.GraceAdvice{Nodes: "n[3-4]", Records: 2, Durations: api.GraceDistribution{Count: 2, P50: 1, P99: 2, P999: 2, Max: 2},
			Thin: "too thin: 2 released teardowns in the window, the advisor recommends from 50"},
			[]string{"n[3-4]: 2 teardowns released", "kill-path floor: unknown (no node sent it)",
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
