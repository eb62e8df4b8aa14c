package aggregator

import (
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/history"
	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// The advice that one node cannot steer, through the intake as agents
// send it (docs/DESIGN.md §5d; the advisor's own tests in
// aggregator/advisor/influence_test.go).

// honestHistory sends, from nodes n1 to n3, 20 clean teardowns each of 10
// to 70 s (the longest 70 s on n3, 69 s on n2), with the kill-path floor
// floorMs on each.
func honestHistory(h *harness, now time.Time, floorMs int64) {
	base := now.Add(-24 * time.Hour)
	for k := 1; k <= 3; k++ {
		var tds []*gwpb.Teardown
		for i := range 20 {
			tds = append(tds, td(fmt.Sprintf("%d%02d", k, i), base.Add(time.Duration(k*100+i)*time.Minute), time.Duration(10+3*i+k)*time.Second, "clean", "alice", "epilog"))
		}
		h.update(fmt.Sprintf("n%d", k), &gwpb.StateUpdate{Meta: upMeta(1, 1), Teardowns: tds, KillPathFloorMs: floorMs, KillPath: "slurm: KillWait 30s"})
	}
}

// TestGraceOneLongRecord: one node's single signed teardown of 20 days
// (released, ended by itself) does not move the recommendation past what
// the honest nodes say: before the bounds it made G 480 h. It is refused
// at the intake (longer than any G plus kill path); one within the bound
// (7 days) is kept, and named in the answer as a node's own that no other
// reached, not followed.
func TestGraceOneLongRecord(t *testing.T) {
	now := t0.Add(48 * time.Hour)
	clk := clock.NewFake(now)
	s := startHistService(t, clk, t.TempDir())
	honestHistory(s.harness, now, 0)
	long := func(job string, d time.Duration) *gwpb.Teardown {
		start := now.Add(-21 * 24 * time.Hour)
		return &gwpb.Teardown{Job: job, Phase: "released", EndedMs: ms(start), DeadlineMs: ms(start.Add(120 * time.Second)), GraceMs: 120_000,
			ReleasedMs: ms(start.Add(d)), Outcome: "exited", User: "mallory", Command: "epilog"}
	}
	s.update("evil", &gwpb.StateUpdate{Meta: upMeta(1, 1), Teardowns: []*gwpb.Teardown{long("666", 20*24*time.Hour)}})
	if st := s.svc.HistoryStats(); st.Refused[history.RefusedBounds] != 1 || st.Records != 60 {
		t.Errorf("20 days: %d stored, %d refused out of bounds, want 60 and 1", st.Records, st.Refused[history.RefusedBounds])
	}
	s.update("evil", &gwpb.StateUpdate{Meta: upMeta(1, 2), Teardowns: []*gwpb.Teardown{long("667", 7*24*time.Hour)}})
	_, ga := askGrace(t, s.base, "")
	r := ga.Recommendation
	if r == nil {
		t.Fatalf("no recommendation: %s", ga.Thin)
	}
	// The honest nodes' longest self-ended: 70 s (n3).
	if r.G > 70 {
		t.Errorf("G %v s with one node's 20-day teardown, want at most the honest nodes' 70 s", r.G)
	}
	if ga.Durations.Max > 70 || ga.Durations.P999 > 70 {
		t.Errorf("durations %+v: one node's teardown moved them past the honest 70 s", ga.Durations)
	}
	// G rests on n3's 70 s, the second node's now (n2's 69 s without
	// evil): the honest nodes' longest. The 7 days of evil are named, not
	// followed.
	want := api.GraceEvidence{Node: "evil", Job: "667", User: "mallory", Command: "epilog", Duration: 7 * 24 * 3600, Outcome: "exited"}
	if r.G != 70 || r.Driver != "self_ended" || r.LongestSelfEnded == nil || r.LongestSelfEnded.Node != "n3" || r.Backing != 2 ||
		!reflect.DeepEqual(r.Nodes, []string{"evil", "n3"}) || len(r.Unbacked) != 1 || r.Unbacked[0] != want || r.FalseDrains != 1 {
		t.Errorf("recommendation %+v, want n3's 70 s, evil's 7 days not followed", r)
	}
	if len(ga.Durations.Above) != 1 || ga.Durations.Above[0] != want || ga.Durations.Bound != 70 {
		t.Errorf("durations counted up to %v s, above %+v: want 70 s, evil's 7 days above", ga.Durations.Bound, ga.Durations.Above)
	}
}

// TestGraceFloorOverflow: a kill-path floor near the largest int64 (it
// overflowed the rounding to a whole second: G was 0.808 s) is refused at
// the intake, with one log line a minute naming the node; the advice
// stands on the honest nodes' floor.
func TestGraceFloorOverflow(t *testing.T) {
	now := t0.Add(48 * time.Hour)
	clk := clock.NewFake(now)
	logs := &testutil.SyncBuffer{}
	s := startHistService(t, clk, t.TempDir(), func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	honestHistory(s.harness, now, 95_000)
	for seq := range uint64(3) {
		s.update("evil", &gwpb.StateUpdate{Meta: upMeta(1, seq+1), KillPathFloorMs: 9223372036854775000, KillPath: "slurm: lies",
			Teardowns: []*gwpb.Teardown{td(fmt.Sprint(seq), now.Add(-time.Hour), 5*time.Second, "clean", "mallory", "epilog")}})
	}
	_, ga := askGrace(t, s.base, "")
	r := ga.Recommendation
	if r == nil {
		t.Fatalf("no recommendation: %s", ga.Thin)
	}
	if r.G < 95 || r.G > 96 {
		t.Errorf("G %v s, want the honest floor 95 s (above the longest self-ended 70 s)", r.G)
	}
	if f := ga.KillPathFloor; f == nil || f.Seconds != 95 || f.Node == "evil" || f.Backing != 3 || len(f.Above) != 0 {
		t.Errorf("floor %+v, want an honest node's 95 s, reported by the 3 honest nodes", f)
	}
	lines := func() int {
		n := 0
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "evil") && strings.Contains(l, "kill_path_floor_ms=9223372036854775000") {
				n++
			}
		}
		return n
	}
	if n := lines(); n != 1 {
		t.Errorf("%d log lines name the node and its floor, want 1 (three updates within a minute):\n%s", n, logs.String())
	}
	s.advance(time.Minute)
	s.update("evil", &gwpb.StateUpdate{Meta: upMeta(1, 9), KillPathFloorMs: 9223372036854775000})
	if n := lines(); n != 2 {
		t.Errorf("%d log lines a minute later, want 2", n)
	}
}
