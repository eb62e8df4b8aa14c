package historian

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/advisor"
	"github.com/gracewatch/gracewatch/aggregator/history"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

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
