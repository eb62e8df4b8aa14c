package teardown

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/diagnose"
	"github.com/gracewatch/gracewatch/agent/request"
)

// TestUserAndCommand: a registration's user is kept across an agent
// restart (the state file) and in the job's reports; a hostile one is
// dropped and the job supervised all the same; a later registration names
// the user of a job registered without one, and never replaces it; the
// teardown's command is the worst process of its latest diagnosis; its
// duration runs from min(T_end, E).
func TestUserAndCommand(t *testing.T) {
	var mu sync.Mutex
	var reported []string // the users of the reports the mesh gets (OnReport)
	onReport := func(o *Options) {
		o.OnReport = func(r *diagnose.Report) {
			mu.Lock()
			reported = append(reported, r.Job+":"+r.User)
			mu.Unlock()
		}
	}
	h := newHarness(t, onReport) // G = 60s
	ctx := context.Background()
	exp := t0.Add(time.Minute).Format(time.RFC3339)
	if _, err := h.s.StartJob(ctx, request.JobStartRequest{Job: "1", Expiration: exp, User: "alice", Cgroup: "/foreign/1"}); err != nil {
		t.Fatal(err)
	}
	if j, err := h.s.StartJob(ctx, request.JobStartRequest{Job: "2", Expiration: exp, User: "x\n$(id)"}); err != nil || j.User != "" {
		t.Fatalf("a hostile user: %+v, %v; want the job registered without a user", j, err)
	}
	seq := h.status().Seq
	if j, err := h.s.UpdateJob(ctx, "2", request.JobUpdateRequest{User: "bob"}); err != nil || j.User != "bob" {
		t.Fatalf("update names the user: %+v, %v", j, err)
	}
	// A change the aggregators hear of (OnChange): the user goes in the
	// next StateUpdate.
	if st := h.status(); st.Seq == seq {
		t.Errorf("naming the user of job 2 changed no status (seq %d)", seq)
	}
	if j, err := h.s.UpdateJob(ctx, "2", request.JobUpdateRequest{User: "mallory"}); err != nil || j.User != "bob" {
		t.Fatalf("a second user replaced the first: %+v, %v", j, err)
	}
	h.stop()
	h.start(onReport)
	if u1, u2 := h.job("1").User, h.job("2").User; u1 != "alice" || u2 != "bob" {
		t.Fatalf("after a restart: users %q, %q; want alice, bob", u1, u2)
	}

	// Job 1 runs past E (t0+1m) and its cgroup holds a process at D.
	h.cg.SetPopulated("/foreign/1", true)
	h.diag.mu.Lock()
	h.diag.procs = []diagnose.Process{{PID: 7, Comm: "sleep", Class: diagnose.Dying}, {PID: 9, Comm: "a.out", Class: diagnose.Unkillable}}
	h.diag.mu.Unlock()
	h.advance(time.Minute)
	if _, err := h.s.EndJob(ctx, "1"); err != nil {
		t.Fatal(err)
	}
	h.advance(time.Minute)
	h.eventually("job 1 diagnosed", func(st Status) bool {
		for _, j := range st.Jobs {
			if j.ID == "1" && j.Command == "a.out" {
				return true
			}
		}
		return false
	})
	mu.Lock()
	if !slices.Contains(reported, "1:alice") || !slices.Contains(reported, "2:bob") {
		t.Errorf("reports sent = %q; want job 1's naming alice, job 2's bob", reported)
	}
	mu.Unlock()
	reps, err := h.s.Diagnose(ctx, "1")
	if err != nil || len(reps) == 0 || reps[0].User != "alice" {
		t.Fatalf("reports of job 1: %+v, %v; want its user alice", reps, err)
	}
	h.cg.SetPopulated("/foreign/1", false)
	h.eventually("job 1 released", func(st Status) bool {
		for _, j := range st.Jobs {
			if j.ID == "1" && j.Phase == PhaseReleased {
				return true
			}
		}
		return false
	})
	rel := h.job("1")
	if rel.User != "alice" || rel.Command != "a.out" {
		t.Errorf("released job 1: user %q command %q", rel.User, rel.Command)
	}
}
