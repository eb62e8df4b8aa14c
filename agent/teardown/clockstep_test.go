package teardown

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/clock"
)

// TestDeadlineSurvivesWallClockSteps: D = min(T_end, E) + G is an instant
// of the wall clock, agreed with the scheduler. A step of the wall clock
// (NTP) between T_end and D makes the job overdue neither early (backward
// step) nor late (forward step) against D; the escalation's waits, which
// the agent alone counts, keep their length whatever the wall clock does.
// The same holds for a running job's E + G.
func TestDeadlineSurvivesWallClockSteps(t *testing.T) {
	const grace = 60 * time.Second
	cases := []struct {
		name    string
		step    time.Duration
		running bool // the job's end is never reported: its deadline is E + G
	}{
		{name: "backward an hour", step: -time.Hour},
		{name: "backward a second", step: -time.Second},
		{name: "forward an hour", step: time.Hour},
		{name: "forward 30s", step: 30 * time.Second},
		{name: "running job, backward an hour", step: -time.Hour, running: true},
		{name: "running job, forward an hour", step: time.Hour, running: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var overdueAt time.Time
			var h *harness
			h = newHarness(t, func(o *Options) {
				o.OnEvent = func(ev Event) {
					if ev.Kind == EventOverdue {
						mu.Lock()
						overdueAt = h.clk.Now()
						mu.Unlock()
					}
				}
			})
			exp := t0.Add(10 * time.Second)
			if !tc.running {
				exp = t0.Add(time.Hour)
			}
			h.start1("1", exp.Format(time.RFC3339), "", "/foreign/1")
			h.cg.SetPopulated("/foreign/1", true)
			if !tc.running {
				h.s.EndJob(context.Background(), "1")
			}
			d := h.job("1").Deadline
			want := t0.Add(grace)
			if tc.running {
				want = exp.Add(grace)
			}
			if !d.Equal(want) {
				t.Fatalf("deadline %v, want %v", d, want)
			}
			h.advance(5 * time.Second)
			h.clk.StepWall(tc.step)
			// Walk the monotonic clock in steps of 200 ms until overdue.
			for range 30000 {
				mu.Lock()
				at := overdueAt
				mu.Unlock()
				if !at.IsZero() {
					break
				}
				if p := h.job("1").Phase; p == PhaseOverdue {
					t.Fatalf("overdue without the event")
				}
				h.advance(200 * time.Millisecond)
			}
			mu.Lock()
			at := overdueAt
			mu.Unlock()
			if at.IsZero() {
				t.Fatal("never overdue")
			}
			if at.Before(d) {
				t.Fatalf("overdue at wall %v, %v before D %v", at, d.Sub(at), d)
			}
			// Late is measured from when the wall clock reached D: at the
			// step, for a step over it.
			reached := d
			if stepped := t0.Add(5*time.Second + tc.step); stepped.After(reached) {
				reached = stepped
			}
			if late := at.Sub(reached); late > clock.WallRecheck+200*time.Millisecond {
				t.Fatalf("overdue at wall %v, %v after the wall clock reached D %v", at, late, d)
			}
			h.eventually("SIGTERM", func(st Status) bool { return st.Jobs[0].Escalation == escTerm })
			// kill_wait (10 s) is elapsed time: a backward step of the wall
			// clock during it does not delay SIGKILL, a forward one does
			// not hasten it.
			h.clk.StepWall(tc.step)
			h.advance(9 * time.Second)
			if got := h.cg.Signals(); len(got) != 1 {
				t.Fatalf("signals %v 9 s after SIGTERM, want SIGTERM alone", got)
			}
			h.advance(time.Second)
			if got := h.cg.Signals(); !slices.Equal(got, []string{"/foreign/1 terminated", "/foreign/1 killed"}) {
				t.Fatalf("signals %v kill_wait after SIGTERM, want SIGTERM and SIGKILL", got)
			}
		})
	}
}

// TestReadoptedEscalationAfterAWallClockStep: a restart re-arms the wait
// after SIGTERM from the persisted wall-clock TERM, bounded by kill_wait:
// a wall clock stepped back while the agent was down does not stretch it.
func TestReadoptedEscalationAfterAWallClockStep(t *testing.T) {
	h := newHarness(t, nil)
	h.endOverdue("1", "/foreign/1")
	h.stop()
	h.clk.StepWall(-time.Hour)
	h.start(nil)
	h.status() // the re-adoption is done
	h.advance(10 * time.Second)
	if got := h.cg.Signals(); len(got) != 2 || got[1] != "/foreign/1 killed" {
		t.Fatalf("signals %v kill_wait after SIGTERM across a restart and a step back of an hour, want SIGKILL", got)
	}
}
