package historian

import (
	"errors"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/advisor"
	"github.com/gracewatch/gracewatch/aggregator/history"
	"github.com/gracewatch/gracewatch/aggregator/intake"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// FuzzHistoryIntake feeds the teardown history's intake (Record)
// a node's StateUpdate of any released teardown and kill-path floor, as a
// node's root can sign one: it never panics, what it keeps is within the
// bounds (a floor, a record's grace, start and duration), and the advice
// over it holds no wrapped value.
func FuzzHistoryIntake(f *testing.F) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	at := now.Add(-time.Hour).UnixMilli()
	f.Add(at+120_000, int64(120_000), at+5000, int64(95_000), "clean", "1")
	f.Add(at+120_000, int64(120_000), at+5000, int64(9223372036854775000), "clean", "2")
	f.Add(now.Add(-21*24*time.Hour).UnixMilli()+120_000, int64(120_000), now.Add(-24*time.Hour).UnixMilli(), int64(0), "exited", "3")
	f.Add(int64(math.MinInt64+5), int64(10), at, int64(-1), "hung", "4")
	f.Add(int64(math.MaxInt64), int64(math.MinInt64), int64(math.MaxInt64), int64(math.MinInt64), "", "")
	f.Add(at, int64(math.MaxInt64), at, int64(1), "killed", "5")
	f.Fuzz(func(t *testing.T, deadline, grace, released, floor int64, outcome, job string) {
		clk := clock.NewFake(now)
		h, err := Open(history.Options{Dir: t.TempDir()}, clk, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		u := &gwpb.StateUpdate{KillPathFloorMs: floor, KillPath: "slurm", Teardowns: []*gwpb.Teardown{
			{Job: job, Phase: "released", DeadlineMs: deadline, GraceMs: grace, ReleasedMs: released, Outcome: outcome}}}
		// Enough honest ones beside it to recommend from.
		for i := range 60 {
			u.Teardowns = append(u.Teardowns, &gwpb.Teardown{Job: string(rune('a'+i%26)) + string(rune('a'+i/26)), Phase: "released",
				DeadlineMs: at + 120_000 + int64(i), GraceMs: 120_000, ReleasedMs: at + int64(i) + 1000*int64(i), Outcome: "clean"})
		}
		u.Teardowns = u.Teardowns[:min(len(u.Teardowns), intake.MaxTeardownsKept)]
		h.Record("n1", u)
		u.KillPathFloorMs = 95_000
		u.Teardowns = u.Teardowns[1:]
		h.Record("n2", u)
		var floors []advisor.Floor
		for _, fl := range h.floors {
			if fl.Ms <= 0 || fl.Ms > history.MaxFloorMs {
				t.Errorf("floor kept: %+v", fl)
			}
			floors = append(floors, fl)
		}
		err = h.store.Scan(0, math.MaxInt64, func(r *history.Record) bool {
			if d := r.DurationMs(); r.StartMs <= 0 || d < 0 || d > history.MaxDurationMs || r.GraceMs < 0 || r.GraceMs > history.MaxGraceMs {
				t.Errorf("record kept: start %d, duration %d, grace %d ms", r.StartMs, d, r.GraceMs)
			}
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
		a, err := advisor.Advise(advisor.Query{FromMs: 0, ToMs: math.MaxInt64, NowMs: now.UnixMilli(), InForce: 2 * time.Minute}, h.store.ScanRaw, nil, floors)
		if err != nil {
			t.Fatal(err)
		}
		if r := a.Recommendation; r != nil && (r.G <= 0 || r.G > time.Duration(history.MaxDurationMs)*time.Millisecond) {
			t.Errorf("G %v", r.G)
		}
	})
}

// A node's released teardowns are stored once (a resend is a duplicate),
// its running ones are advised with the user and command of its latest
// update, and its floor is kept while it is within the bound.
func TestRecordAndAdvise(t *testing.T) {
	now := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	clk := clock.NewFake(now)
	h, err := Open(history.Options{Dir: t.TempDir()}, clk, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	start := now.Add(-time.Hour)
	u := &gwpb.StateUpdate{KillPathFloorMs: 30_000, KillPath: "slurm", Teardowns: []*gwpb.Teardown{
		{Job: "7", Phase: "released", DeadlineMs: start.Add(2 * time.Minute).UnixMilli(), GraceMs: 120_000,
			ReleasedMs: start.Add(40 * time.Second).UnixMilli(), Outcome: "clean"},
		{Job: "8", Phase: "teardown", User: "alice", Command: "sim", DeadlineMs: now.Add(time.Minute).UnixMilli(), GraceMs: 120_000},
	}}
	h.Record("n1", u)
	h.Record("n1", u) // a resend
	st := h.Stats()
	if st.Records != 1 || st.Refused[history.RefusedDuplicate] != 1 {
		t.Errorf("stats %+v: want 1 record and 1 duplicate", st)
	}
	running := []view.Node{{Name: "n1", Teardowns: []view.Teardown{{Job: "8", Phase: "teardown", Deadline: now.Add(time.Minute), Grace: 2 * time.Minute}}}}
	a, err := h.Advise(advisor.Query{FromMs: 0, ToMs: now.Add(time.Hour).UnixMilli()}, 2*time.Minute, running)
	if err != nil {
		t.Fatal(err)
	}
	if a.Records != 1 || a.Running != 1 || a.NowMs != now.UnixMilli() || len(a.FloorAbove) != 1 || a.LongestRunning == nil || a.LongestRunning.User != "alice" {
		t.Errorf("advice %+v: want 1 record, 1 running (alice's), now, n1's floor", a)
	}

	var off *Historian
	off.Record("n1", u)
	if _, err := off.Advise(advisor.Query{}, time.Minute, nil); !errors.Is(err, history.ErrOff) {
		t.Errorf("advice of a history off: %v, want history.ErrOff", err)
	}
	if st := off.Stats(); st.Records != 0 {
		t.Errorf("stats of a history off: %+v", st)
	}
	off.Close()
}
