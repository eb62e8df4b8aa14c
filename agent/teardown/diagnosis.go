package teardown

// Diagnostics: snapshots taken off the main loop and the reports they make.

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/gracewatch/gracewatch/agent/diagnose"
	"github.com/gracewatch/gracewatch/agent/request"
)

// request builds a diagnostics request for j.
func (s *Supervisor) request(j *job, stage string, single bool) diagnose.Request {
	tl := diagnose.Timeline{TeardownStart: j.Ended, Deadline: j.Deadline}
	if !j.Term.IsZero() {
		t := j.Term
		tl.Term = &t
	}
	if !j.Kill.IsZero() {
		t := j.Kill
		tl.Kill = &t
	}
	if !j.NoExpiration && !j.Expiration.IsZero() {
		e := j.Expiration
		tl.Expiration = &e
	}
	req := diagnose.Request{Job: j.ID, Grace: j.Grace, Stage: stage, Timeline: tl, SingleSample: single,
		NotEnded: j.Ended.IsZero()}
	if j.Cgroup != "" {
		req.Cgroups = append(req.Cgroups, diagnose.CgroupRef{Path: j.Cgroup, Owned: true})
	}
	if j.Foreign != "" {
		req.Cgroups = append(req.Cgroups, diagnose.CgroupRef{Path: j.Foreign, V1: j.ForeignV1})
	}
	return req
}

// snapshot takes a report off the main loop and, back on it, stores it, folds
// its summary into the reason and runs then (if set). then runs even when
// there is no diagnoser.
func (s *Supervisor) snapshot(j *job, stage string, single bool, then func()) {
	if s.o.Diagnoser == nil {
		if then != nil {
			then()
		}
		return
	}
	req := s.request(j, stage, single)
	j.snapshotRun = true
	ctx := s.ctx
	go func() {
		r := s.o.Diagnoser.Snapshot(ctx, req)
		s.post(func() {
			j.snapshotRun = false
			if r != nil {
				r.Outcome = s.outcomeNow(j)
				if stage == diagnose.StageAfterEscalation {
					r.Outcome = diagnose.OutcomeHung
					j.Outcome = diagnose.OutcomeHung
				}
				// A recheck that finds what the last one found is not a
				// new report: saving it every 30 s of a long hang would
				// push every other job's report out of the bounded store.
				if last := j.lastReport; last == nil || last.Stage != stage || last.Summary != diagnose.Summarize(r) {
					s.adoptReport(j, r)
				}
			}
			if then != nil {
				then()
			}
			s.changed()
		})
	}()
}

// adoptReport keeps r as j's latest report, saves it, and updates the reason.
func (s *Supervisor) adoptReport(j *job, r *diagnose.Report) {
	r.Node = s.o.Node
	r.User = j.User
	r.Summary = diagnose.Summarize(r)
	if r.Stage != diagnose.StageOnDemand {
		r.Suggestions = diagnose.Suggest(r)
	}
	j.lastReport = r
	if s.o.Reports != nil {
		path, err := s.o.Reports.Save(r)
		if err != nil {
			s.log.Error("cannot save report", "job", j.ID, "err", err)
		} else {
			j.Report = path
		}
	}
	if !j.Violated {
		return
	}
	j.Summary = r.Summary
	attrs := []any{"job", j.ID, "user", j.User, "stage", r.Stage, "outcome", r.Outcome, "report", j.Report, "summary", r.Summary}
	for _, a := range diagnose.LogAttrs(r) {
		attrs = append(attrs, a)
	}
	s.log.Warn("teardown diagnosis", attrs...)
	if s.o.OnReport != nil {
		s.o.OnReport(r)
	}
	s.refreshReason()
	s.persist()
}

// Diagnose returns the latest report of each job with one (or of job), and a
// fresh snapshot of a job still tearing down.
func (s *Supervisor) Diagnose(ctx context.Context, id string) ([]*diagnose.Report, error) {
	type item struct {
		last    *diagnose.Report
		req     *diagnose.Request
		outcome string // of a fresh snapshot: where the job stands now
		user    string
	}
	var items []item
	var opErr error
	err := s.do(ctx, func() {
		ids := make([]string, 0, len(s.jobs))
		for k := range s.jobs {
			ids = append(ids, k)
		}
		sort.Strings(ids)
		if id != "" {
			if s.jobs[id] == nil {
				opErr = fmt.Errorf("job %s: %w", id, request.ErrUnknownJob)
				return
			}
			ids = []string{id}
		}
		for _, k := range ids {
			j := s.jobs[k]
			it := item{last: j.lastReport, outcome: s.outcomeNow(j), user: j.User}
			if it.last != nil && j.Phase == PhaseReleased {
				// Its processes are gone: what the report says is history.
				h := *it.last
				h.History = true
				it.last = &h
			}
			if (j.active() && (j.Cgroup != "" || j.Foreign != "")) || (j.Phase == PhaseRunning && j.Foreign != "") {
				r := s.request(j, diagnose.StageOnDemand, false)
				it.req = &r
			}
			if it.last != nil || it.req != nil {
				items = append(items, it)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	if opErr != nil {
		return nil, opErr
	}
	out := []*diagnose.Report{}
	for _, it := range items {
		if it.req != nil && s.o.Diagnoser != nil {
			r := s.o.Diagnoser.Snapshot(ctx, *it.req)
			if r != nil {
				r.Node = s.o.Node
				r.User = it.user
				r.Outcome = it.outcome
				r.Summary = diagnose.Summarize(r)
				r.Suggestions = diagnose.Suggest(r)
				out = append(out, r)
				continue
			}
		}
		if it.last != nil {
			out = append(out, it.last)
		}
	}
	return out, nil
}

// outcomeNow is where j's teardown stands, as a report's outcome: within
// its grace (pending), past the deadline (overdue), signalled (escalated),
// survivors classified (hung), or, released, how it ended.
func (s *Supervisor) outcomeNow(j *job) string {
	switch {
	case j.Phase == PhaseReleased:
		return j.Outcome
	case j.Phase != PhaseOverdue:
		return diagnose.OutcomePending
	case j.Escalation == escNone:
		return diagnose.OutcomeOverdue
	case j.Escalation == escClassified:
		return diagnose.OutcomeHung
	}
	return diagnose.OutcomeEscalated
}

// recheckInterval is how often the survivors of a classified teardown are
// looked at again while it stays overdue: the node's reason and report say
// what is true now (a process gone, a class worse or better), not what
// was true at the classification.
const recheckInterval = 30 * time.Second

// armRecheck schedules the next look at j's survivors.
func (s *Supervisor) armRecheck(j *job) {
	s.armAfter(j, recheckInterval, func() { s.recheck(j) })
}

// recheck takes a fresh snapshot of a classified, still overdue job; its
// summary replaces the reason's when it changed.
func (s *Supervisor) recheck(j *job) {
	if j.Phase != PhaseOverdue || j.Escalation != escClassified {
		return
	}
	if !j.snapshotRun {
		s.snapshot(j, diagnose.StageAfterEscalation, false, nil)
	}
	s.armRecheck(j)
}
