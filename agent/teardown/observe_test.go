package teardown

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/diagnose"
)

// overdueObserved makes job 9 overdue in observe mode, its processes (a
// foreign cgroup) still there, and returns the status once diagnosed.
func overdueObserved(t *testing.T) (*harness, Status) {
	t.Helper()
	h := newHarness(t, func(o *Options) { o.Observe = true })
	h.diag.procs = []diagnose.Process{{PID: 42, Comm: "cat", State: "D", Wchan: "request_wait_answer", Class: diagnose.Unkillable}}
	h.start1("9", t0.Add(time.Hour).Format(time.RFC3339), "", "/foreign/9")
	h.cg.SetPopulated("/foreign/9", true)
	if _, err := h.s.EndJob(context.Background(), "9"); err != nil {
		t.Fatal(err)
	}
	h.advance(60 * time.Second)
	st := h.eventually("the would-be violation, diagnosed", func(st Status) bool {
		return len(st.Jobs) == 1 && st.Jobs[0].Phase == PhaseOverdue && st.ObservedCause != nil
	})
	return h, st
}

// Observe mode: the overdue teardown is diagnosed and shown, and nothing
// is signalled or latched, then or an hour later; its processes end by
// themselves and it is released as "exited".
func TestObserveModeSignalsAndLatchesNothing(t *testing.T) {
	h, st := overdueObserved(t)
	if st.State != StateTeardown || st.Reason != "" || st.Cause != nil || !st.Observe || !slices.Equal(st.Observed, []string{"9"}) {
		t.Fatalf("observed: state %s reason %q cause %+v observe %v observed %v, want a teardown with job 9 observed",
			st.State, st.Reason, st.Cause, st.Observe, st.Observed)
	}
	if c := st.ObservedCause; c.Wchan != "request_wait_answer" || c.ExamplePID != 42 {
		t.Errorf("observed cause %+v", c)
	}
	if got := h.diag.stages(); !slices.Equal(got, []string{diagnose.StageBeforeSignal}) {
		t.Errorf("snapshots %v, want the one at the deadline", got)
	}
	h.advance(time.Hour)
	st = h.status()
	if s, k := h.cg.Signals(), h.cg.Kills(); len(s)+len(k) != 0 {
		t.Fatalf("observe mode signalled: signals %v kills %v", s, k)
	}
	if st.State != StateTeardown || st.Jobs[0].Escalation != escNone {
		t.Fatalf("an hour on: state %s escalation %q", st.State, st.Jobs[0].Escalation)
	}
	h.cg.SetPopulated("/foreign/9", false)
	st = h.eventually("released", func(st Status) bool { return st.Jobs[0].Phase == PhaseReleased })
	if st.State != StateUp || st.Jobs[0].Outcome != "exited" || len(st.Observed) != 0 || st.ObservedCause != nil {
		t.Fatalf("released: state %s outcome %q observed %v", st.State, st.Jobs[0].Outcome, st.Observed)
	}
}

// An agent restarted in observe mode keeps observing an observed job; one
// restarted in enforce mode enforces it at once: latch and SIGTERM.
func TestObservedJobAfterRestart(t *testing.T) {
	h, _ := overdueObserved(t)
	h.stop()
	h.start(func(o *Options) { o.Observe = true })
	h.advance(time.Hour)
	if st := h.status(); st.State != StateTeardown || len(h.cg.Signals()) != 0 {
		t.Fatalf("restarted observing: state %s signals %v", st.State, h.cg.Signals())
	}
	h.stop()
	h.start(nil)
	st := h.eventually("enforced", func(st Status) bool { return st.State == StateDown && st.Jobs[0].Escalation == escTerm })
	if got := h.cg.Signals(); !slices.Equal(got, []string{"/foreign/9 terminated"}) || len(st.Observed) != 0 {
		t.Fatalf("signals %v observed %v, want one SIGTERM and nothing observed", got, st.Observed)
	}
}

// An agent restarted in observe mode with a job overdue from enforce mode
// whose escalation had not begun observes it: no signal.
func TestEnforcedJobRestartedInObserveMode(t *testing.T) {
	h := newHarness(t, nil)
	h.endOverdue("5", "/foreign/5")
	h.stop()
	h.start(func(o *Options) { o.Observe = true })
	n := len(h.cg.Signals()) + len(h.cg.Kills())
	h.advance(time.Hour)
	if got := len(h.cg.Signals()) + len(h.cg.Kills()); got != n {
		t.Fatalf("observe mode went on with the escalation: signals %v kills %v", h.cg.Signals(), h.cg.Kills())
	}
}
