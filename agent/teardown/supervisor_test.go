package teardown

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/diagnose"
	"github.com/gracewatch/gracewatch/agent/request"
	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/testutil"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

type harness struct {
	t      *testing.T
	s      *Supervisor
	clk    *clock.Fake
	cg     *fakeCgroups
	diag   *fakeDiagnoser
	dir    string
	cancel context.CancelFunc
	done   chan struct{}
}

type fakeDiagnoser struct {
	mu    sync.Mutex
	reqs  []diagnose.Request
	procs []diagnose.Process
	block chan struct{} // if set, Snapshot waits for it to close
}

func (d *fakeDiagnoser) Snapshot(ctx context.Context, req diagnose.Request) *diagnose.Report {
	if d.block != nil {
		<-d.block
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reqs = append(d.reqs, req)
	return &diagnose.Report{Job: req.Job, Stage: req.Stage, Grace: req.Grace.String(), Timeline: req.Timeline,
		NotEnded: req.NotEnded, Processes: append([]diagnose.Process{}, d.procs...)}
}

func (d *fakeDiagnoser) stages() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, r := range d.reqs {
		out = append(out, r.Stage)
	}
	return out
}

func newHarness(t *testing.T, tweak func(*Options)) *harness {
	t.Helper()
	h := &harness{t: t, clk: clock.NewFake(t0), cg: newFakeCgroups(), diag: &fakeDiagnoser{}, dir: t.TempDir()}
	h.start(tweak)
	return h
}

func (h *harness) start(tweak func(*Options)) {
	o := Options{Node: "n1", StateDir: h.dir, Clock: h.clk, Cgroups: h.cg, Diagnoser: h.diag,
		Grace: 60 * time.Second, KillWait: 10 * time.Second, UnkillableAfter: 30 * time.Second,
		AutoResume: AutoResumeNever, SignalForeign: true}
	if tweak != nil {
		tweak(&o)
	}
	s, err := New(o)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.s, h.cancel, h.done = s, cancel, make(chan struct{})
	go func() { s.Run(ctx); close(h.done) }()
	h.t.Cleanup(h.stop)
}

func (h *harness) stop() {
	h.cancel()
	<-h.done
}

// advance steps the fake clock and waits until the main loop has handled
// every timer that fell due.
func (h *harness) advance(d time.Duration) {
	h.clk.Advance(d)
	h.status()
}

func (h *harness) status() Status {
	h.t.Helper()
	st, err := h.s.Status(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	return st
}

// eventually waits (real time, bounded) for cond on the status: snapshots
// run on their own goroutine.
func (h *harness) eventually(what string, cond func(Status) bool) Status {
	h.t.Helper()
	var st Status
	if !testutil.Poll(30*time.Second, func() bool {
		st = h.status()
		return cond(st)
	}) {
		h.t.Fatalf("timed out waiting for %s; status %+v", what, st)
	}
	return st
}

func (h *harness) start1(id, exp, grace, cgroup string) Job {
	h.t.Helper()
	j, err := h.s.StartJob(context.Background(), request.JobStartRequest{Job: id, Expiration: exp, Grace: grace, Cgroup: cgroup})
	if err != nil {
		h.t.Fatalf("start %s: %v", id, err)
	}
	return j
}

// endRunning starts job id (expiring an hour after t0, grace as given, in
// the cgroup cg), marks cg populated and ends the job while it still has a
// process: the teardown's clock runs from here.
func (h *harness) endRunning(id, grace, cg string) {
	h.t.Helper()
	h.start1(id, t0.Add(time.Hour).Format(time.RFC3339), grace, cg)
	h.cg.SetPopulated(cg, true)
	h.s.EndJob(context.Background(), id)
}

// endOverdue ends job id, still running in cg, lets its default grace of
// 60 s pass and waits until the agent has sent it SIGTERM.
func (h *harness) endOverdue(id, cg string) {
	h.t.Helper()
	h.endRunning(id, "", cg)
	h.advance(60 * time.Second)
	h.eventually("SIGTERM", func(st Status) bool { return st.Jobs[0].Escalation == escTerm })
}

func TestDeadlineIsMinOfEndAndExpirationPlusGrace(t *testing.T) {
	cases := []struct {
		name    string
		exp     time.Time
		endAt   time.Time
		grace   string
		wantDln time.Time
	}{
		{name: "early end", exp: t0.Add(time.Hour), endAt: t0.Add(10 * time.Minute), grace: "", wantDln: t0.Add(10*time.Minute + 60*time.Second)},
		// Reported after E but within G: D = E + G (an end reported after
		// E + G is too late: TestNoEndReported).
		{name: "end after expiration", exp: t0.Add(time.Minute), endAt: t0.Add(time.Minute + 20*time.Second), grace: "30s", wantDln: t0.Add(time.Minute + 30*time.Second)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.start1("7", tc.exp.Format(time.RFC3339), tc.grace, "/foreign/7")
			h.cg.SetPopulated("/foreign/7", true)
			h.clk.Set(tc.endAt)
			j, err := h.s.EndJob(context.Background(), "7")
			if err != nil {
				t.Fatal(err)
			}
			if j.Deadline.IsZero() || !j.Deadline.Equal(tc.wantDln) {
				t.Fatalf("deadline = %v, want %v", j.Deadline, tc.wantDln)
			}
			st := h.status()
			if st.State != StateTeardown || st.FreeAt.IsZero() || !st.FreeAt.Equal(tc.wantDln) {
				t.Fatalf("status %s free_at %v, want teardown free_at %v", st.State, st.FreeAt, tc.wantDln)
			}
		})
	}
}

func TestTeardownWithinGraceSendsNoSignal(t *testing.T) {
	h := newHarness(t, nil)
	h.start1("1", t0.Add(time.Hour).Format(time.RFC3339), "", "/foreign/1")
	h.cg.SetPopulated("/foreign/1", true)
	if _, err := h.s.EndJob(context.Background(), "1"); err != nil {
		t.Fatal(err)
	}
	h.advance(59 * time.Second)
	if st := h.status(); st.State != StateTeardown {
		t.Fatalf("state %s before the deadline, want teardown", st.State)
	}
	h.cg.SetPopulated("/foreign/1", false)
	st := h.status()
	if st.State != StateUp || !st.FreeAt.IsZero() {
		t.Fatalf("state %s free_at %v after the cgroup emptied, want up", st.State, st.FreeAt)
	}
	h.advance(time.Hour)
	if sig := h.cg.Signals(); len(sig) != 0 {
		t.Fatalf("signals sent: %v", sig)
	}
	if st := h.status(); st.Jobs[0].Phase != PhaseReleased || st.Jobs[0].Outcome != "clean" {
		t.Fatalf("job = %+v, want released clean", st.Jobs[0])
	}
}

func TestOverdueEscalatesAndLatches(t *testing.T) {
	for _, policy := range []string{AutoResumeNever, AutoResumeWhenClean} {
		t.Run(policy, func(t *testing.T) {
			h := newHarness(t, func(o *Options) { o.AutoResume = policy })
			h.diag.procs = []diagnose.Process{{PID: 42, Comm: "cat", State: "D", Wchan: "request_wait_answer", Class: diagnose.Unkillable}}
			h.endRunning("9", "", "/foreign/9")
			h.advance(60 * time.Second)
			st := h.eventually("SIGTERM after the before-signal snapshot", func(st Status) bool {
				return len(st.Jobs) == 1 && st.Jobs[0].Escalation == escTerm
			})
			if st.State != StateDown || !strings.Contains(st.Reason, "job 9") {
				t.Fatalf("at the deadline: state %s reason %q, want down naming job 9", st.State, st.Reason)
			}
			if got := h.cg.Signals(); !slices.Equal(got, []string{"/foreign/9 terminated"}) {
				t.Fatalf("signals %v, want one SIGTERM", got)
			}
			h.advance(10 * time.Second)
			if got := h.cg.Signals(); len(got) != 2 || got[1] != "/foreign/9 killed" {
				t.Fatalf("signals %v, want SIGKILL after kill_wait", got)
			}
			h.advance(30 * time.Second)
			// The before-signal snapshot already names the hung process:
			// wait for the one after the escalation (its own goroutine).
			st = h.eventually("classification", func(st Status) bool {
				return len(st.Hung) == 1 && len(h.diag.stages()) == 2 && st.Jobs[0].Escalation == escClassified
			})
			if st.Hung[0].PID != 42 || st.Hung[0].Class != "unkillable" {
				t.Fatalf("hung = %+v", st.Hung)
			}
			// The latch's cause for the aggregators' incidents: its wait
			// channel (no file system named), not clean yet.
			if c := st.Cause; c == nil || c.Wchan != "request_wait_answer" || c.ExamplePID != 42 || st.Clean || st.AdminDrain {
				t.Fatalf("cause %+v clean %v admin_drain %v", st.Cause, st.Clean, st.AdminDrain)
			}
			if got := h.diag.stages(); !slices.Equal(got, []string{diagnose.StageBeforeSignal, diagnose.StageAfterEscalation}) {
				t.Fatalf("snapshot stages %v", got)
			}
			h.cg.SetPopulated("/foreign/9", false)
			st = h.status()
			if policy == AutoResumeNever {
				if st.State != StateDown {
					t.Fatalf("never: state %s after the processes went, want down", st.State)
				}
				if !st.Clean || st.Cause == nil {
					t.Fatalf("never: clean %v cause %+v after the processes went, want clean with the cause kept", st.Clean, st.Cause)
				}
				if st, err := h.s.Drain(context.Background(), "disk", "admin"); err != nil || st.Clean || !st.AdminDrain {
					t.Fatalf("drained on top: %v clean %v admin_drain %v, want not clean, admin drain", err, st.Clean, st.AdminDrain)
				}
				st, err := h.s.Resume(context.Background(), request.ResumeRequest{Reason: "fixed"})
				if err != nil || st.State != StateUp {
					t.Fatalf("resume: %v, state %s", err, st.State)
				}
			} else if st.State != StateUp {
				t.Fatalf("when-clean: state %s reason %q, want up", st.State, st.Reason)
			}
			if j := h.status().Jobs[0]; j.Outcome != diagnose.OutcomeHung {
				t.Fatalf("outcome %q, want hung", j.Outcome)
			}
		})
	}
}

func TestKilledOutcomeKeepsReason(t *testing.T) {
	h := newHarness(t, nil)
	h.endRunning("3", "5s", "/foreign/3")
	h.advance(5 * time.Second)
	h.eventually("SIGTERM", func(st Status) bool { return st.Jobs[0].Escalation == escTerm })
	h.advance(10 * time.Second)
	h.cg.SetPopulated("/foreign/3", false)
	st := h.status()
	if st.State != StateDown || st.Jobs[0].Outcome != diagnose.OutcomeKilled {
		t.Fatalf("state %s outcome %q, want down/killed", st.State, st.Jobs[0].Outcome)
	}
	if !strings.Contains(st.Reason, "killed by SIGKILL") || !strings.Contains(st.Reason, "grace 5s") {
		t.Fatalf("reason %q", st.Reason)
	}
	// No further timers act on a released job.
	n := len(h.cg.Signals())
	h.advance(time.Hour)
	if len(h.cg.Signals()) != n {
		t.Fatalf("signals after release: %v", h.cg.Signals())
	}
}

func TestForeignCgroupNotSignalledByDefault(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.SignalForeign = false })
	h.start1("4", t0.Format(time.RFC3339), "1s", "/foreign/4")
	h.cg.SetPopulated("/foreign/4", true)
	h.s.EndJob(context.Background(), "4")
	h.advance(time.Minute)
	h.eventually("down", func(st Status) bool { return st.State == StateDown })
	h.advance(time.Minute)
	if got := h.cg.Signals(); len(got) != 0 {
		t.Fatalf("foreign cgroup signalled: %v", got)
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	h := newHarness(t, nil)
	h.start1("1", t0.Add(time.Hour).Format(time.RFC3339), "", "")
	before := h.status()
	cases := []struct {
		name  string
		req   request.JobStartRequest
		want  error
		field string
	}{
		{"duplicate", request.JobStartRequest{Job: "1", Expiration: t0.Add(time.Hour).Format(time.RFC3339)}, request.ErrDuplicateJob, ""},
		{"not a time", request.JobStartRequest{Job: "2", Expiration: "tomorrow"}, nil, "expiration"},
		{"far past", request.JobStartRequest{Job: "2", Expiration: "1000000000"}, nil, "expiration"},
		{"negative grace", request.JobStartRequest{Job: "2", Expiration: "0", Grace: "-5s"}, nil, "grace"},
		{"bad id", request.JobStartRequest{Job: "a/b", Expiration: "0"}, nil, "job"},
		{"missing cgroup", request.JobStartRequest{Job: "2", Expiration: "0", Cgroup: "/missing"}, nil, "cgroup"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.s.StartJob(context.Background(), tc.req)
			if err == nil {
				t.Fatal("accepted")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			var ie *request.InputError
			if tc.field != "" && (!errors.As(err, &ie) || ie.Field != tc.field) {
				t.Fatalf("err %v, want an input error on %s", err, tc.field)
			}
		})
	}
	if _, err := h.s.EndJob(context.Background(), "nope"); !errors.Is(err, request.ErrUnknownJob) {
		t.Fatalf("end of unknown job: %v", err)
	}
	after := h.status()
	if len(after.Jobs) != 1 || after.Seq != before.Seq || after.Jobs[0].Phase != PhaseRunning {
		t.Fatalf("state changed by bad input: before %+v after %+v", before, after)
	}
}

func TestRestartReadoptsAndEnforcesDeadline(t *testing.T) {
	h := newHarness(t, nil)
	h.endRunning("5", "", "/foreign/5")
	seq := h.status().Seq
	h.stop()

	// A new supervisor on the same state dir, as after kill -9 and restart.
	h.clk.Advance(30 * time.Second)
	h.start(nil)
	st := h.status()
	if st.State != StateTeardown || st.FreeAt.IsZero() || !st.FreeAt.Equal(t0.Add(60*time.Second)) {
		t.Fatalf("after restart: %s free_at %v", st.State, st.FreeAt)
	}
	if st.Seq < seq {
		t.Fatalf("sequence went backwards: %d < %d", st.Seq, seq)
	}
	h.advance(30 * time.Second)
	h.eventually("down after restart", func(st Status) bool { return st.State == StateDown })
	h.stop()

	// The latch survives a restart too.
	h.start(nil)
	if st := h.status(); st.State != StateDown {
		t.Fatalf("latch lost over restart: %s", st.State)
	}
}

func TestIdleSupervisorDoesNoReads(t *testing.T) {
	h := newHarness(t, nil)
	// Its deadline E + G lies beyond the idle time.
	h.start1("6", t0.Add(3*time.Hour).Format(time.RFC3339), "", "/foreign/6")
	before := h.cg.Reads()
	for i := 0; i < 100; i++ {
		h.advance(time.Minute)
	}
	h.status()
	if got := h.cg.Reads() - before; got != 0 {
		t.Fatalf("%d cgroup reads while idle for 100 minutes", got)
	}
}

func TestDrainHoldsUntilResume(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.AutoResume = AutoResumeWhenClean })
	st, err := h.s.Drain(context.Background(), "bad DIMM", "agg-1")
	if err != nil {
		t.Fatal(err)
	}
	if st.State != StateDown || st.Reason != "drained by agg-1: bad DIMM" {
		t.Fatalf("after drain: %s %q", st.State, st.Reason)
	}
	// A clean teardown does not auto-resume an administrator's drain.
	h.endRunning("1", "", "/foreign/1")
	h.cg.SetPopulated("/foreign/1", false)
	if st := h.status(); st.State != StateDown {
		t.Fatalf("drain cleared by a clean teardown: %s", st.State)
	}
	if _, err := h.s.Drain(context.Background(), "", "x"); err == nil {
		t.Fatal("empty reason accepted")
	}
	st, err = h.s.Resume(context.Background(), request.ResumeRequest{Reason: "DIMM replaced"})
	if err != nil || st.State != StateUp {
		t.Fatalf("resume: %v %s", err, st.State)
	}
	if st.Incarnation != 1 || st.Seq == 0 {
		t.Fatalf("incarnation %d seq %d", st.Incarnation, st.Seq)
	}
}

func TestLatchWaitsBrieflyForTheDiagnosis(t *testing.T) {
	h := newHarness(t, nil)
	h.diag.procs = []diagnose.Process{{PID: 77, Comm: "cat", State: "D", Wchan: "request_wait_answer", Class: diagnose.KillableD}}
	h.diag.block = make(chan struct{})
	h.endRunning("8", "", "/foreign/8")
	h.advance(60 * time.Second)
	if st := h.status(); st.State != StateTeardown || st.Jobs[0].Phase != PhaseOverdue {
		t.Fatalf("at D with the snapshot pending: %s/%s, want teardown/overdue", st.State, st.Jobs[0].Phase)
	}
	h.advance(latchWait)
	st := h.status()
	if st.State != StateDown || st.Reason != "job 8 teardown exceeded grace 1m0s" {
		t.Fatalf("after latchWait: %s %q", st.State, st.Reason)
	}
	if len(h.cg.Signals()) != 0 {
		t.Fatalf("signalled before the snapshot: %v", h.cg.Signals())
	}
	close(h.diag.block)
	st = h.eventually("diagnosis in the reason", func(st Status) bool { return strings.Contains(st.Reason, "pid 77") })
	if got := h.cg.Signals(); len(got) != 1 {
		t.Fatalf("signals %v, want SIGTERM after the snapshot", got)
	}
}

func TestGoneDuringTheLatchWaitStillLatches(t *testing.T) {
	h := newHarness(t, nil)
	h.diag.block = make(chan struct{})
	defer close(h.diag.block)
	h.endRunning("9", "", "/foreign/9")
	h.advance(60 * time.Second)
	h.cg.SetPopulated("/foreign/9", false)
	st := h.status()
	if st.State != StateDown || st.Jobs[0].Outcome != "exited" {
		t.Fatalf("state %s outcome %q, want down/exited", st.State, st.Jobs[0].Outcome)
	}
}

// TestRepeatedDrainsStayBounded: a drain repeated with the same reason by
// ever other callers (an aggregator's address and port) does not grow the
// reason; different reasons grow it up to MaxReasonBytes, cut with a
// marker; the state file stays small after 1,000 drains of each kind.
func TestRepeatedDrainsStayBounded(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	var first Status
	for i := range 1000 {
		st, err := h.s.Drain(ctx, "bad DIMM", fmt.Sprintf("10.0.0.1:%d", 40000+i))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = st
		}
	}
	st := h.status()
	if st.Reason != first.Reason || st.Reason != "drained by 10.0.0.1:40000: bad DIMM" {
		t.Fatalf("after 1,000 drains with one reason: reason %q (%d bytes), want the first drain's %q", st.Reason, len(st.Reason), first.Reason)
	}
	size := func() int64 {
		fi, err := os.Stat(filepath.Join(h.dir, "state.json"))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	if n := size(); n > 2<<10 {
		t.Fatalf("state file is %d bytes after 1,000 drains with one reason, want at most 2 KiB", n)
	}
	for i := range 1000 {
		if _, err := h.s.Drain(ctx, fmt.Sprintf("reason %d", i), "agg"); err != nil {
			t.Fatal(err)
		}
	}
	st = h.status()
	if len(st.Reason) > MaxReasonBytes || !strings.HasSuffix(st.Reason, reasonCut) || !strings.HasPrefix(st.Reason, first.Reason) {
		t.Fatalf("after 1,000 drains with other reasons: reason of %d bytes ending %q, want at most %d bytes, the first drain first, cut with %q",
			len(st.Reason), st.Reason[max(0, len(st.Reason)-20):], MaxReasonBytes, reasonCut)
	}
	if n := size(); n > 4<<10 {
		t.Fatalf("state file is %d bytes after 2,000 drains, want at most 4 KiB", n)
	}
	t.Logf("state file %d bytes after 2,000 drains; reason %d bytes", size(), len(st.Reason))
}
