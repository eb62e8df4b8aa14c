package teardown

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A teardown whose job ended after the E the agent was told: its exec
// system did not end it there, and may have a later E (a limit extended
// there alone; a Flux job planned with G whose plugin was removed before
// it started, so that the exec system ends it at E + G). The agent asks
// once, as the teardown starts; a later E re-arms D = min(T_end, E') + G;
// the same E leaves D as it was. A job that ended at D itself (the plugin's
// case) is judged once the answer is in: its E + G as a running job and
// its end come at once, and either may ask first (one question each, at
// most two).
func TestExpirationCommandForATeardownPastE(t *testing.T) {
	e := t0.Add(time.Minute) // the E the agent was told; G = 60 s
	for _, c := range []struct {
		name          string
		ended, answer time.Time
		want          time.Time // D after the answer; zero: down at once
		maxCalls      int
	}{
		{"its exec system's E is later: re-armed", t0.Add(90 * time.Second), t0.Add(105 * time.Second), t0.Add(150 * time.Second), 1},
		{"its exec system's E is the same: D as it was", t0.Add(90 * time.Second), e, e.Add(time.Minute), 1},
		{"ended at D, E + G in the exec system: re-armed", e.Add(time.Minute), e.Add(time.Minute), e.Add(2 * time.Minute), 2},
		{"ended at D, the same E: down", e.Add(time.Minute), e, time.Time{}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			ex := &fakeExpirations{answers: []string{c.answer.Format(time.RFC3339)}}
			h := newHarness(t, func(o *Options) { o.Expirations = ex })
			h.start1("11", e.Format(time.RFC3339), "", "/foreign/11")
			h.cg.SetPopulated("/foreign/11", true)
			h.endAt("11", c.ended)
			if c.want.IsZero() {
				st := h.eventually("down once answered", func(st Status) bool { return st.State == StateDown })
				if n := ex.Calls(); n < 1 || n > c.maxCalls || !strings.Contains(st.Reason, "exceeded grace") {
					t.Fatalf("calls %d, reason %q", ex.Calls(), st.Reason)
				}
				return
			}
			h.eventually("asked", func(Status) bool {
				j := h.job("11")
				return ex.Calls() >= 1 && j.Deadline.Equal(c.want)
			})
			if st := h.status(); st.State == StateDown {
				t.Fatalf("down before D: %q", st.Reason)
			}
			h.clk.Set(c.want) // D, still hung: latched, not asked again
			st := h.eventually("down at D", func(st Status) bool { return st.State == StateDown })
			if n := ex.Calls(); n < 1 || n > c.maxCalls || !strings.Contains(st.Reason, "exceeded grace") {
				t.Fatalf("calls %d, reason %q", ex.Calls(), st.Reason)
			}
		})
	}
}

// A teardown whose job ended before its E is not a question for the exec
// system: its deadline is T_end + G, whatever E says.
func TestNoExpirationCommandForATeardownBeforeE(t *testing.T) {
	ex := &fakeExpirations{answers: []string{t0.Add(time.Hour).Format(time.RFC3339)}}
	h := newHarness(t, func(o *Options) { o.Expirations = ex })
	h.endRunning("12", "", "/foreign/12")
	h.advance(time.Minute)
	h.eventually("down at T_end + G", func(st Status) bool { return st.State == StateDown })
	if ex.Calls() != 0 {
		t.Fatalf("the exec system was asked %d times", ex.Calls())
	}
}

// While its question is open, a teardown is judged at the latest when the
// question's bound comes (the command's timeout after it was asked: Held),
// not at the D of the E in question: told that D, an aggregator judging the
// node by the stale E served it down while the agent waited for a slow
// command (TestFluxGracePlan, squeezed onto one busy CPU). The job's D and
// the node's free_at, the scheduler's plan, stay D. Answered with the same
// E, the node is down at once and nothing is held any more.
func TestTeardownHeldWhileAsking(t *testing.T) {
	e := t0.Add(time.Minute) // G = 60 s
	hold := make(chan struct{})
	ex := &fakeExpirations{answers: []string{e.Format(time.RFC3339)}, hold: hold}
	h := newHarness(t, func(o *Options) { o.Expirations = ex })
	h.start1("13", e.Format(time.RFC3339), "", "/foreign/13")
	h.cg.SetPopulated("/foreign/13", true)
	ended := t0.Add(119 * time.Second)
	d := e.Add(time.Minute) // min(T_end, E) + G
	h.endAt("13", ended)
	until := ended.Add(ex.Timeout())
	h.eventually("held until the question's bound", func(st Status) bool {
		j := h.job("13")
		return ex.Calls() == 1 && st.State == StateTeardown && st.FreeAt.Equal(d) && j.Deadline.Equal(d) &&
			j.Held.Equal(until) && j.Judged().Equal(until)
	})
	h.clk.Set(d.Add(5 * time.Second)) // past D, the question still open
	if st, j := h.status(), h.job("13"); st.State != StateTeardown || !st.FreeAt.Equal(d) || !j.Judged().Equal(until) {
		t.Fatalf("past D while asking: state %s (%q), free_at %v, judged %v; want teardown, free_at D %v, judged %v",
			st.State, st.Reason, st.FreeAt, j.Judged(), d, until)
	}
	close(hold)
	st := h.eventually("down once answered", func(st Status) bool { return st.State == StateDown })
	if j := h.job("13"); !j.Held.IsZero() || !j.Judged().Equal(d) || !strings.Contains(st.Reason, "exceeded grace") {
		t.Errorf("after the answer: held %v, judged %v, reason %q; want nothing held, D %v, a grace violation", j.Held, j.Judged(), st.Reason, d)
	}
}

// A running job asked about at its E + G is held the same way: its end may
// come while the question is open (Flux ends a job planned with G there),
// and the aggregators must not judge it by the stale E meanwhile.
func TestRunningJobHeldWhileAsking(t *testing.T) {
	hold := make(chan struct{})
	e := t0.Add(time.Minute)
	ex := &fakeExpirations{answers: []string{t0.Add(10 * time.Minute).Format(time.RFC3339)}, hold: hold}
	h := newHarness(t, func(o *Options) { o.Expirations = ex })
	h.start1("14", e.Format(time.RFC3339), "", "")
	at := e.Add(time.Minute) // E + G
	h.clk.Set(at)
	h.eventually("held while asked at E + G", func(st Status) bool {
		j := h.job("14")
		return ex.Calls() == 1 && st.State == StateTeardown && st.FreeAt.Equal(at) && j.Held.Equal(at.Add(ex.Timeout()))
	})
	close(hold)
	h.eventually("re-armed, nothing held", func(st Status) bool {
		j := h.job("14")
		return st.State == StateUp && j.Held.IsZero() && j.Deadline.Equal(t0.Add(11*time.Minute))
	})
}

// A question answered after D makes the job overdue then, and its latch
// lands only once the snapshot is in (latchWait at most): until then the
// job is told as judged by the latch's bound, never by the D already
// past. Told that D for those milliseconds, an aggregator took the node
// for silent and drained it by the central deadline just before the
// agent's own DOWN came (TestFlux, an agent restarted during a hung
// housekeeping, whose question was answered a second after D).
func TestHeldUntilTheLatchAfterALateAnswer(t *testing.T) {
	e := t0.Add(time.Minute) // G = 60 s
	hold := make(chan struct{})
	ex := &fakeExpirations{answers: []string{e.Format(time.RFC3339)}, hold: hold}
	h := newHarness(t, func(o *Options) { o.Expirations = ex })
	h.diag.block = make(chan struct{})
	h.start1("15", e.Format(time.RFC3339), "", "/foreign/15")
	h.cg.SetPopulated("/foreign/15", true)
	ended := t0.Add(119 * time.Second)
	d := e.Add(time.Minute)
	h.endAt("15", ended)
	h.eventually("asking", func(Status) bool { return ex.Calls() == 1 && !h.job("15").Held.IsZero() })
	answered := d.Add(2 * time.Second) // the answer comes past D
	h.clk.Set(answered)
	close(hold)
	h.eventually("overdue, the snapshot pending", func(st Status) bool {
		j := h.job("15")
		return j.Phase == PhaseOverdue && st.State == StateTeardown
	})
	st := h.status()
	j := h.job("15")
	if want := answered.Add(latchWait); !j.Judged().Equal(want) || !st.FreeAt.Equal(d) || !j.Deadline.Equal(d) {
		t.Fatalf("overdue past D, latch pending: judged %v, free_at %v, D %v; want judged %v (the latch's bound), free_at and D %v",
			j.Judged(), st.FreeAt, j.Deadline, want, d)
	}
	h.advance(latchWait)
	st = h.eventually("down by the latch's bound", func(st Status) bool { return st.State == StateDown })
	if j := h.job("15"); !j.Held.IsZero() || !j.Judged().Equal(d) {
		t.Errorf("latched: held %v, judged %v; want nothing held, D %v", j.Held, j.Judged(), d)
	}
	close(h.diag.block)
	h.eventually("diagnosed", func(st Status) bool { return len(h.cg.Signals()) == 1 })
}

// An agent restarted while its teardown's question is open asks it again
// as it re-adopts the teardown, not at D: the answer is in before D, so
// that the node is judged at D by its exec system's word (TestFlux, the
// agent restarted during a hung housekeeping, asked only at D and was
// answered a second after it).
func TestRestartAsksTheOpenQuestionAgain(t *testing.T) {
	e := t0.Add(time.Minute) // G = 60 s
	hold := make(chan struct{})
	ex := &fakeExpirations{answers: []string{e.Format(time.RFC3339)}, hold: hold}
	h := newHarness(t, func(o *Options) { o.Expirations = ex })
	h.start1("16", e.Format(time.RFC3339), "", "/foreign/16")
	h.cg.SetPopulated("/foreign/16", true)
	ended := t0.Add(100 * time.Second)
	d := e.Add(time.Minute)
	h.endAt("16", ended)
	h.eventually("asking", func(Status) bool { return ex.Calls() == 1 && !h.job("16").Held.IsZero() })
	h.stop() // the question is cut short
	close(hold)
	ex2 := &fakeExpirations{answers: []string{e.Format(time.RFC3339)}}
	h.clk.Set(ended.Add(time.Second))
	h.start(func(o *Options) { o.Expirations = ex2 })
	h.eventually("asked again at the restart, answered before D", func(st Status) bool {
		j := h.job("16")
		return ex2.Calls() == 1 && j.Held.IsZero() && st.State == StateTeardown && j.Deadline.Equal(d)
	})
	h.clk.Set(d)
	st := h.eventually("down at D", func(st Status) bool { return st.State == StateDown })
	if n := ex2.Calls(); n != 1 || !strings.Contains(st.Reason, "exceeded grace") {
		t.Fatalf("after D: asked %d times since the restart, reason %q; want 1, a grace violation", n, st.Reason)
	}
}

// endAt ends job id by a report at ended: the clock steps to just before
// it first, so that the end comes as the report, not by the clock (which
// would make a running job at E + G ask on its own).
func (h *harness) endAt(id string, ended time.Time) {
	h.t.Helper()
	h.clk.Set(ended.Add(-time.Millisecond))
	h.status()
	h.clk.Set(ended)
	if _, err := h.s.EndJob(context.Background(), id); err != nil {
		h.t.Fatal(err)
	}
}
