package aggregator

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/actuate"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// observedUpdate is an observing agent's update: job 7 overdue since
// deadline, diagnosed (its report and its observed cause).
func observedUpdate(seq uint64, deadline time.Time) *gwpb.StateUpdate {
	return &gwpb.StateUpdate{
		Meta: teardownMeta(1, seq, deadline),
		Mode: gwpb.Mode_MODE_OBSERVE,
		Teardowns: []*gwpb.Teardown{{Job: "7", Phase: "overdue", EndedMs: ms(t0), DeadlineMs: ms(deadline), GraceMs: 60000},
			{Job: "8", Phase: "teardown", EndedMs: ms(t0), DeadlineMs: ms(deadline.Add(time.Hour)), GraceMs: 60000}},
		Reports: []*gwpb.Report{{Job: "7", Stage: "before-signal", Outcome: "overdue", TakenMs: ms(deadline),
			Summary: "job 7 teardown exceeded grace 1m0s: 1 still running (pid 42 cat, D in request_wait_answer, lustre /scratch)"}},
		ObservedCause: &gwpb.Cause{Fstype: "lustre", Source: "mds1@o2ib:/scratch", Mountpoint: "/scratch", Wchan: "request_wait_answer",
			Class: "unkillable", Unkillable: 1, ExamplePid: 42, ExampleComm: "cat", Job: "7"},
	}
}

// An observing agent under an enforcing aggregator: its overdue teardown
// is a would-be drain, long past the central deadline the node stays
// schedulable, and the cluster is mixed: /readyz says so, and the log
// says it once.
func TestObservingAgent(t *testing.T) {
	logs := &testutil.SyncBuffer{}
	h := newHarness(t, func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(logs, nil)) })
	d := at(time.Minute)
	h.member("n1", teardownMeta(1, 2, d))
	h.member("n2", upMeta(1, 1))
	h.update("n2", &gwpb.StateUpdate{Meta: upMeta(1, 1), Mode: gwpb.Mode_MODE_ENFORCE})
	h.update("n1", observedUpdate(3, d))
	h.advance(time.Hour)
	n := h.wantState("n1", view.StateTeardown)
	if !n.Schedulable || n.Mode != "observe" || n.WouldDrain == nil {
		t.Fatalf("n1: schedulable %v mode %q would_drain %+v", n.Schedulable, n.Mode, n.WouldDrain)
	}
	wd := n.WouldDrain
	if !wd.At.Equal(d) || !slices.Equal(wd.Jobs, []string{"7"}) || !strings.HasPrefix(wd.Reason, "job 7 teardown exceeded grace 1m0s: 1 still running") ||
		wd.Cause == nil || wd.Cause.Mountpoint != "/scratch" {
		t.Errorf("would drain %+v (cause %+v), want job 7 at its deadline with its diagnosis", wd, wd.Cause)
	}
	if n2 := h.node("n2"); n2.Mode != "enforce" || n2.WouldDrain != nil {
		t.Errorf("n2: mode %q would_drain %+v", n2.Mode, n2.WouldDrain)
	}
	r := h.svc.Ready()
	if r.Mode != "enforce" || !r.ModesMixed || r.NodeModes["observe"] != 1 || r.NodeModes["enforce"] != 1 ||
		!strings.Contains(r.Detail, "mixed modes: this aggregator is in enforce mode, the nodes' agents: 1 enforce, 1 observe") {
		t.Errorf("readyz %+v", r)
	}
	// The node's next update changes nothing about the mix: still one line.
	h.update("n1", observedUpdate(4, d))
	if got := strings.Count(logs.String(), "mixed modes"); got != 1 {
		t.Errorf("%d log lines about mixed modes, want 1:\n%s", got, logs.String())
	}
	// The observing agent switches to enforce (and latches the node down):
	// one mode again, said once.
	h.update("n1", &gwpb.StateUpdate{Meta: downMeta(2, 1, "job 7 teardown exceeded grace"), StartedMs: ms(at(time.Hour)),
		Mode: gwpb.Mode_MODE_ENFORCE, Teardowns: []*gwpb.Teardown{{Job: "7", Phase: "overdue", DeadlineMs: ms(d)}}})
	if n := h.wantState("n1", view.StateDown); n.WouldDrain != nil {
		t.Errorf("enforced: would drain %+v", n.WouldDrain)
	}
	if r := h.svc.Ready(); r.ModesMixed || !strings.Contains(logs.String(), "one mode again") {
		t.Errorf("after the switch: readyz %+v", r)
	}
}

// An observing aggregator: no actuator and no reservation command is
// kept; a node its enforcing agent latched DOWN for a violation is served
// schedulable with its would-be drain; a silent node past its central
// deadline too; an administrator's drain stays down.
func TestObservingAggregator(t *testing.T) {
	h := newHarness(t, func(o *Options) {
		o.Policy.Observe = true
		o.Actuators = []actuate.Config{{On: actuate.OnDown, Command: []string{"/bin/false"}}}
		o.Reservations.Command = []string{"/bin/false"}
	})
	if h.svc.opts.Actuators != nil || h.svc.opts.Reservations.Enabled() || h.svc.plan != nil {
		t.Fatalf("observe mode kept actuators %v or reservations %v", h.svc.opts.Actuators, h.svc.opts.Reservations.Command)
	}
	d := at(time.Minute)
	// n1: latched down by its (enforcing) agent.
	h.member("n1", downMeta(1, 2, "job 7 teardown exceeded grace"))
	h.update("n1", &gwpb.StateUpdate{Meta: downMeta(1, 2, "job 7 teardown exceeded grace"), Mode: gwpb.Mode_MODE_ENFORCE,
		Reason: "job 7 teardown exceeded grace 1m0s: 1 unkillable", Teardowns: []*gwpb.Teardown{{Job: "7", Phase: "overdue", DeadlineMs: ms(d)},
			{Job: "8", Phase: "teardown", DeadlineMs: ms(at(3 * time.Hour))}},
		Cause: &gwpb.Cause{Wchan: "request_wait_answer", Class: "unkillable", Unkillable: 1}})
	// n2: silent in teardown.
	h.member("n2", teardownMeta(1, 2, d))
	// n3: drained by an administrator.
	h.member("n3", downMeta(1, 2, "drained by root: disk"))
	h.update("n3", &gwpb.StateUpdate{Meta: downMeta(1, 2, "drained by root: disk"), AdminDrain: true})
	h.advance(2 * time.Hour)

	n1 := h.wantState("n1", view.StateTeardown)
	if !n1.Schedulable || !n1.FreeAt.Equal(at(3*time.Hour)) || n1.Reason != "" || n1.WouldDrain == nil ||
		n1.WouldDrain.Reason != "job 7 teardown exceeded grace 1m0s: 1 unkillable" || !n1.WouldDrain.At.Equal(at(time.Minute)) ||
		n1.WouldDrain.Cause == nil || n1.WouldDrain.Cause.Wchan != "request_wait_answer" || !slices.Equal(n1.WouldDrain.Jobs, []string{"7"}) {
		t.Errorf("n1 %+v would drain %+v", n1, n1.WouldDrain)
	}
	n2 := h.wantState("n2", view.StateTeardown)
	if !n2.Schedulable || n2.WouldDrain == nil || !strings.HasPrefix(n2.WouldDrain.Reason, view.CentralDeadlineReason) ||
		!n2.WouldDrain.At.Equal(d.Add(defaultPolicy.ClockSkewAllowance)) {
		t.Errorf("n2 %+v would drain %+v", n2, n2.WouldDrain)
	}
	if n3 := h.wantState("n3", view.StateDown); n3.WouldDrain != nil || n3.Schedulable {
		t.Errorf("n3 %+v", n3)
	}
	if r := h.svc.Ready(); r.Mode != "observe" || !r.ModesMixed || !strings.Contains(r.Detail, "mixed modes") {
		t.Errorf("readyz %+v", r)
	}
}

// What an agent sends of observe mode is bounded at the intake: a mode
// this build does not know counts as an agent that predates modes
// (enforce), and an observed cause that breaks a bound is dropped.
func TestObserveIntakeBounds(t *testing.T) {
	h := newHarness(t)
	d := at(time.Minute)
	u := observedUpdate(3, d)
	u.Mode = gwpb.Mode(99)
	h.member("n1", teardownMeta(1, 2, d))
	h.update("n1", u)
	if n := h.node("n1"); n.Mode != "enforce" || n.WouldDrain != nil {
		t.Errorf("unknown mode: %q would drain %+v", n.Mode, n.WouldDrain)
	}
	u = observedUpdate(4, d)
	u.ObservedCause.Mountpoint = "/scratch\x1b[31m" + strings.Repeat("x", 300)
	h.update("n1", u)
	h.advance(time.Hour)
	n := h.wantState("n1", view.StateTeardown)
	if n.WouldDrain == nil || n.WouldDrain.Cause != nil {
		t.Errorf("hostile observed cause: would drain %+v", n.WouldDrain)
	}
}
