package teardown

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/diagnose"
	"github.com/gracewatch/gracewatch/agent/request"
)

// The deadline E + G holds from registration (issue 9): these tests step
// the fake clock to it without any end report.

func (h *harness) job(id string) Job {
	h.t.Helper()
	for _, j := range h.status().Jobs {
		if j.ID == id {
			return j
		}
	}
	h.t.Fatalf("job %s not in the status", id)
	return Job{}
}

func TestNoEndReported(t *testing.T) {
	h := newHarness(t, nil) // G = 60s
	j := h.start1("41", t0.Add(time.Minute).Format(time.RFC3339), "", "")
	if j.Deadline.IsZero() || !j.Deadline.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("running job's deadline = %v, want E + G = %v", j.Deadline, t0.Add(2*time.Minute))
	}
	h.advance(time.Minute - time.Millisecond)
	if st := h.status(); st.State != StateUp {
		t.Fatalf("before E: %s, want up", st.State)
	}
	// From E on, the job's time is up: the node is served in teardown, free
	// at E + G at the latest.
	h.advance(time.Millisecond)
	if st := h.status(); st.State != StateTeardown || st.FreeAt.IsZero() || !st.FreeAt.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("at E: %s free_at %v, want teardown free_at E + G", st.State, st.FreeAt)
	}
	h.advance(time.Minute - time.Millisecond)
	if st := h.status(); st.State != StateTeardown || h.job("41").Phase != PhaseRunning {
		t.Fatalf("before E + G: %s/%s, want teardown/running", st.State, h.job("41").Phase)
	}
	h.advance(time.Millisecond)
	st := h.eventually("down at E + G", func(st Status) bool { return st.State == StateDown })
	want := "job 41: no end reported by the deadline (E + 1m0s)"
	if st.Reason != want {
		t.Fatalf("reason %q, want %q", st.Reason, want)
	}
	if p := h.job("41").Phase; p != PhaseOverdue {
		t.Fatalf("phase %s, want overdue", p)
	}
	// Nothing to watch: it stays overdue (never released on no evidence)
	// until the end is reported or an administrator resumes the node.
	h.advance(time.Hour)
	if p := h.job("41").Phase; p != PhaseOverdue {
		t.Fatalf("an hour later: phase %s, want overdue", p)
	}
	st, err := h.s.Resume(context.Background(), request.ResumeRequest{Reason: "checked"})
	if err != nil || st.State != StateUp {
		t.Fatalf("resume: %v %s", err, st.State)
	}
	if j := h.job("41"); j.Phase != PhaseReleased || j.Outcome != outcomeUnreported {
		t.Fatalf("after resume: %s/%s, want released/%s (no registration stays for ever)", j.Phase, j.Outcome, outcomeUnreported)
	}
}

func TestLateEndReleasesAnOverdueJob(t *testing.T) {
	h := newHarness(t, nil)
	h.start1("42", t0.Add(time.Minute).Format(time.RFC3339), "", "")
	h.advance(2 * time.Minute)
	h.eventually("down", func(st Status) bool { return st.State == StateDown })
	j, err := h.s.EndJob(context.Background(), "42")
	if err != nil {
		t.Fatal(err)
	}
	if j.Phase != PhaseReleased || j.EndedBy != "report" {
		t.Fatalf("late end: %s ended_by %q, want released by report", j.Phase, j.EndedBy)
	}
	if st := h.status(); st.State != StateDown {
		t.Fatalf("the latch went with the late end: %s", st.State)
	}
}

func TestObservedCgroupEmptiesBeforeTheDeadline(t *testing.T) {
	h := newHarness(t, nil)
	h.cg.SetPopulated("/slurm/job_5", true)
	j := h.start1("5", t0.Add(time.Minute).Format(time.RFC3339), "", "/slurm/job_5")
	if len(j.Processes) != 1 || j.ForeignName != "0::/slurm/job_5" {
		t.Fatalf("registered: processes %v, cgroup %q", j.Processes, j.ForeignName)
	}
	h.advance(time.Minute + 10*time.Second)
	h.cg.SetPopulated("/slurm/job_5", false)
	j = h.job("5")
	if j.Phase != PhaseReleased || j.EndedBy != "cgroup" || j.Outcome != "clean" {
		t.Fatalf("after the cgroup emptied: %s ended_by %q outcome %q, want released/cgroup/clean", j.Phase, j.EndedBy, j.Outcome)
	}
	if !j.Ended.Equal(t0.Add(time.Minute + 10*time.Second)) {
		t.Fatalf("T_end %v, want when it emptied", j.Ended)
	}
	h.advance(time.Hour)
	if st := h.status(); st.State != StateUp {
		t.Fatalf("%s after E + G, want up", st.State)
	}
	if s := h.cg.Signals(); len(s) != 0 {
		t.Fatalf("signals %v, want none", s)
	}
}

func TestObservedCgroupStaysPopulated(t *testing.T) {
	h := newHarness(t, nil) // SignalForeign: the harness allows it
	h.diag.procs = []diagnose.Process{{PID: 5814, Comm: "a.out", State: "D", Wchan: "request_wait_answer", Class: diagnose.Unkillable}}
	h.cg.SetPopulated("/slurm/job_6", true)
	h.start1("6", t0.Add(time.Minute).Format(time.RFC3339), "2m", "/slurm/job_6")
	h.advance(3*time.Minute - time.Millisecond)
	if st := h.status(); st.State != StateTeardown {
		t.Fatalf("before E + G: %s, want teardown", st.State)
	}
	h.advance(time.Millisecond)
	st := h.eventually("down naming the job's process", func(st Status) bool {
		return st.State == StateDown && strings.Contains(st.Reason, "pid 5814")
	})
	want := "job 6 not ended by its deadline (E + 2m0s): 1 unkillable (pid 5814 a.out, D in request_wait_answer)"
	if st.Reason != want {
		t.Fatalf("reason %q, want %q", st.Reason, want)
	}
	if len(st.Hung) != 1 || st.Hung[0].PID != 5814 {
		t.Fatalf("hung %+v", st.Hung)
	}
	h.eventually("SIGTERM to the job's cgroup", func(Status) bool {
		return len(h.cg.Signals()) == 1 && h.cg.Signals()[0] == "/slurm/job_6 terminated"
	})
	// Its cgroup empties: the job has ended, its release follows.
	h.cg.SetPopulated("/slurm/job_6", false)
	if j := h.job("6"); j.Phase != PhaseReleased || j.EndedBy != "cgroup" {
		t.Fatalf("after emptying: %s ended_by %q", j.Phase, j.EndedBy)
	}
}

func TestJobUpdateMovesTheDeadline(t *testing.T) {
	h := newHarness(t, nil)
	h.start1("7", t0.Add(time.Minute).Format(time.RFC3339), "", "")
	h.advance(30 * time.Second)
	j, err := h.s.UpdateJob(context.Background(), "7", request.JobUpdateRequest{Expiration: t0.Add(10 * time.Minute).Format(time.RFC3339)})
	if err != nil {
		t.Fatal(err)
	}
	if !j.Deadline.Equal(t0.Add(11 * time.Minute)) {
		t.Fatalf("deadline %v after the update, want the new E + G", j.Deadline)
	}
	h.advance(2 * time.Minute) // past the old E + G
	if st := h.status(); st.State != StateUp {
		t.Fatalf("%s at the old E + G: a false DOWN on an extended job", st.State)
	}
	h.clk.Set(t0.Add(10*time.Minute - time.Millisecond))
	if st := h.status(); st.State != StateUp {
		t.Fatalf("%s before the new E", st.State)
	}
	h.clk.Set(t0.Add(11*time.Minute - time.Millisecond))
	if st := h.status(); st.State != StateTeardown || !st.FreeAt.Equal(t0.Add(11*time.Minute)) {
		t.Fatalf("%s free_at %v before the new E + G, want teardown free at it", st.State, st.FreeAt)
	}
	h.advance(time.Millisecond)
	h.eventually("down at the new E + G", func(st Status) bool { return st.State == StateDown })
	// An expiration removed: no deadline until the job ends.
	h2 := newHarness(t, nil)
	h2.start1("8", t0.Add(time.Minute).Format(time.RFC3339), "", "")
	if j, err := h2.s.UpdateJob(context.Background(), "8", request.JobUpdateRequest{Expiration: "0"}); err != nil || !j.Deadline.IsZero() {
		t.Fatalf("update to no expiration: %v, deadline %v", err, j.Deadline)
	}
	h2.advance(24 * time.Hour)
	if st := h2.status(); st.State != StateUp {
		t.Fatalf("%s for a job without an expiration", st.State)
	}
}

func TestJobUpdateBadInput(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	h.start1("r", t0.Add(time.Hour).Format(time.RFC3339), "", "/cg/r")
	h.start1("rel", t0.Add(time.Hour).Format(time.RFC3339), "", "")
	h.s.EndJob(ctx, "rel")
	h.start1("od", t0.Add(time.Minute).Format(time.RFC3339), "1s", "")
	h.advance(62 * time.Second)
	h.eventually("od overdue", func(Status) bool { return h.job("od").Phase == PhaseOverdue })
	before := h.status().Jobs
	future := t0.Add(2 * time.Hour).Format(time.RFC3339)
	cases := []struct {
		name, id string
		req      request.JobUpdateRequest
		want     error
		field    string
	}{
		{"unknown", "nope", request.JobUpdateRequest{Expiration: future}, request.ErrUnknownJob, ""},
		{"released", "rel", request.JobUpdateRequest{Expiration: future}, request.ErrConflict, ""},
		{"overdue", "od", request.JobUpdateRequest{Expiration: future}, request.ErrConflict, ""},
		{"into the past", "r", request.JobUpdateRequest{Expiration: t0.Format(time.RFC3339)}, nil, "expiration"},
		{"not a time", "r", request.JobUpdateRequest{Expiration: "soon"}, nil, "expiration"},
		{"nothing", "r", request.JobUpdateRequest{}, nil, "expiration"},
		{"another cgroup", "r", request.JobUpdateRequest{Cgroup: "/cg/other"}, request.ErrConflict, ""},
		{"cgroup not allowed", "r", request.JobUpdateRequest{Cgroup: "/not-allowed/x"}, nil, "cgroup"},
		{"bad id", "a/b", request.JobUpdateRequest{Expiration: future}, nil, "job"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := h.s.UpdateJob(ctx, c.id, c.req)
			var ie *request.InputError
			switch {
			case err == nil:
				t.Fatal("accepted")
			case c.want != nil && !errors.Is(err, c.want):
				t.Fatalf("error %v, want %v", err, c.want)
			case c.field != "" && (!errors.As(err, &ie) || ie.Field != c.field):
				t.Fatalf("error %v, want an input error of field %s", err, c.field)
			}
			if c.id != "nope" && !strings.Contains(err.Error(), c.id) && c.field == "" {
				t.Errorf("error %q does not name the job", err)
			}
		})
	}
	after := h.status().Jobs
	for i := range before {
		b, a := before[i], after[i]
		if b.Phase != a.Phase || !timeEq(b.Deadline, a.Deadline) || !timeEq(b.Expiration, a.Expiration) || b.Foreign != a.Foreign {
			t.Errorf("job %s changed by refused updates: %+v -> %+v", b.ID, b, a)
		}
	}
}

func timeEq(a, b time.Time) bool { return a.Equal(b) }

// fakeExpirations answers the expiration command's questions.
type fakeExpirations struct {
	mu      sync.Mutex
	answers []string // one per call; the last repeats
	err     error
	calls   []string
	hold    chan struct{} // when set, a call answers once it is closed
}

func (f *fakeExpirations) Expiration(ctx context.Context, job string) (string, error) {
	f.mu.Lock()
	f.calls = append(f.calls, job)
	hold := f.hold
	f.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return "", f.err
	}
	a := f.answers[0]
	if len(f.answers) > 1 {
		f.answers = f.answers[1:]
	}
	return a, nil
}

// Timeout is the bound a real command would have.
func (f *fakeExpirations) Timeout() time.Duration { return 10 * time.Second }

func (f *fakeExpirations) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func TestExpirationCommandFindsAnExtension(t *testing.T) {
	ex := &fakeExpirations{answers: []string{t0.Add(10 * time.Minute).Format(time.RFC3339)}}
	h := newHarness(t, func(o *Options) { o.Expirations = ex })
	h.start1("9", t0.Add(time.Minute).Format(time.RFC3339), "", "")
	h.advance(2 * time.Minute) // the old E + G: the exec system is asked
	h.eventually("asked and re-armed", func(Status) bool {
		j := h.job("9")
		return ex.Calls() == 1 && !j.Deadline.IsZero() && j.Deadline.Equal(t0.Add(11*time.Minute))
	})
	if st := h.status(); st.State != StateUp {
		t.Fatalf("%s after the extension was found: want up until the new E (no false DOWN)", st.State)
	}
	h.clk.Set(t0.Add(11 * time.Minute)) // the new E + G: asked once more, same answer
	st := h.eventually("down at the new E + G", func(st Status) bool { return st.State == StateDown })
	if ex.Calls() != 2 || !strings.Contains(st.Reason, "no end reported") {
		t.Fatalf("calls %d, reason %q", ex.Calls(), st.Reason)
	}
}

func TestExpirationCommandFailures(t *testing.T) {
	for _, c := range []struct {
		name   string
		answer string
		err    error
	}{
		{"fails", "", errors.New("exit status 1: slurm_load_jobs error: Invalid job id specified")},
		{"times out", "", errors.New("did not answer within 10s")},
		{"garbage", "TimeLimit=UNLIMITED\x00\xff", nil},
		{"unchanged", t0.Add(time.Minute).Format(time.RFC3339), nil},
		{"earlier", t0.Add(30 * time.Second).Format(time.RFC3339), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			ex := &fakeExpirations{answers: []string{c.answer}, err: c.err}
			h := newHarness(t, func(o *Options) { o.Expirations = ex })
			h.start1("10", t0.Add(time.Minute).Format(time.RFC3339), "", "")
			h.advance(2 * time.Minute)
			st := h.eventually("down at E + G", func(st Status) bool { return st.State == StateDown })
			if ex.Calls() != 1 || !strings.Contains(st.Reason, "no end reported") {
				t.Fatalf("calls %d, reason %q", ex.Calls(), st.Reason)
			}
			if j := h.job("10"); !j.Expiration.Equal(t0.Add(time.Minute)) {
				t.Fatalf("expiration changed to %v", j.Expiration)
			}
		})
	}
}

func TestV1CgroupIsPolledOnlyWhileObserved(t *testing.T) {
	h := newHarness(t, nil)
	h.cg.SetPopulated("/cg/v2", true)
	h.start1("a", t0.Add(3*time.Hour).Format(time.RFC3339), "", "/cg/v2")
	for range 60 {
		h.advance(time.Second)
	}
	if n := h.cg.V1Reads(); n != 0 {
		t.Fatalf("%d v1 reads while no v1 cgroup is observed", n)
	}
	h.cg.SetPopulated("/v1/slurm/job_b", true)
	// No expiration: the poll does not depend on a deadline.
	j := h.start1("b", "0", "", "/v1/slurm/job_b")
	if len(j.Processes) != 1 || j.ForeignName != "freezer:/slurm/job_b" {
		t.Fatalf("v1 job registered: %+v", j)
	}
	start := h.cg.V1Reads()
	for range 10 {
		h.advance(time.Second)
	}
	if n := h.cg.V1Reads() - start; n < 9 || n > 11 {
		t.Fatalf("%d v1 reads in 10 s, want one a second", n)
	}
	h.cg.SetPopulated("/v1/slurm/job_b", false) // no event in v1: seen at the next poll
	h.advance(time.Second)
	if j := h.job("b"); j.Phase != PhaseReleased || j.EndedBy != "cgroup" {
		t.Fatalf("1 s after the v1 cgroup emptied: %s ended_by %q", j.Phase, j.EndedBy)
	}
	after := h.cg.V1Reads()
	for range 10 {
		h.advance(time.Second)
	}
	if n := h.cg.V1Reads() - after; n != 0 {
		t.Fatalf("%d v1 reads after the job was released", n)
	}
}

func TestRegistrationDeadlineSurvivesARestart(t *testing.T) {
	h := newHarness(t, nil)
	h.start1("11", t0.Add(time.Minute).Format(time.RFC3339), "", "")
	h.stop()
	h.clk.Set(t0.Add(5 * time.Minute)) // the agent was away at E + G
	h.start(nil)
	h.status()                  // readopt has armed the deadline, in the past
	h.advance(time.Millisecond) // the fake clock runs such a timer at its next step
	st := h.eventually("down after the restart", func(st Status) bool { return st.State == StateDown })
	if !strings.Contains(st.Reason, "job 11: no end reported") {
		t.Fatalf("reason %q", st.Reason)
	}
}

func TestTooManyJobs(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.MaxJobs = 50 })
	h.start1("done", "0", "", "")
	h.s.EndJob(context.Background(), "done") // released: does not count
	for i := range 50 {
		if _, err := h.s.StartJob(context.Background(), request.JobStartRequest{Job: "j" + strconv.Itoa(i), Expiration: "0"}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := h.s.StartJob(context.Background(), request.JobStartRequest{Job: "one-more", Expiration: "0"})
	if !errors.Is(err, request.ErrFull) {
		t.Fatalf("job 51: %v, want ErrFull", err)
	}
}
