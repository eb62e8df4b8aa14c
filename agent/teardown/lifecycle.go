package teardown

// A job's teardown from its start to its release: watches, the check for
// emptiness, re-adoption after a restart.

import (
	"os"
	"slices"
	"sort"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/agent/diagnose"
)

// readopt re-arms watches and timers of persisted jobs after a restart.
func (s *Supervisor) readopt() {
	for _, j := range s.jobs {
		if !j.active() && j.Phase != api.PhaseRunning {
			continue
		}
		s.watch(j)
		if !j.active() {
			continue
		}
		if s.o.Reports != nil {
			if r, err := s.o.Reports.Latest(j.ID); err == nil && r != nil {
				j.lastReport = r
			}
		}
		s.log.Info("re-adopted teardown", "job", j.ID, "phase", j.Phase, "deadline", j.Deadline, "escalation", j.Escalation)
		switch {
		case j.Phase == api.PhaseTeardown:
			s.armAt(j, j.Deadline, func() { s.overdue(j) })
		case j.Escalation == escNone:
			s.latchJob(j)
			s.escalateTerm(j)
		case j.Escalation == escTerm:
			s.armAt(j, j.Term.Add(s.o.KillWait), func() { s.escalateKill(j) })
		case j.Escalation == escKill:
			s.armAt(j, j.Kill.Add(s.o.UnkillableAfter), func() { s.classify(j) })
		}
		s.check(j)
	}
}

// watch subscribes to the job's cgroups.
func (s *Supervisor) watch(j *job) {
	if len(j.cancels) > 0 {
		return
	}
	id := j.ID
	for _, p := range []string{j.Cgroup, j.Foreign} {
		if p == "" {
			continue
		}
		cancel, err := s.o.Cgroups.Watch(p, func() { s.markDirty(id) })
		if err != nil {
			s.log.Warn("cannot watch cgroup", "job", id, "cgroup", p, "err", err)
			continue
		}
		j.cancels = append(j.cancels, cancel)
	}
}

// populated reports whether any supervised cgroup of j holds a process. An
// unreadable cgroup counts as populated: only populated 0 is proof.
func (s *Supervisor) populated(j *job) bool {
	for _, p := range []string{j.Cgroup, j.Foreign} {
		if p == "" {
			continue
		}
		pop, err := s.o.Cgroups.Populated(p)
		if err != nil {
			s.log.Warn("cannot read cgroup events", "job", j.ID, "cgroup", p, "err", err)
			return true
		}
		if pop {
			return true
		}
	}
	return false
}

// check releases j when its teardown is done: every epilogue reaped by Wait
// and every supervised cgroup at populated 0.
func (s *Supervisor) check(j *job) {
	if !j.active() || len(j.children) > 0 || s.populated(j) {
		return
	}
	s.release(j)
}

// startTeardown records T_end and arms the deadline.
func (s *Supervisor) startTeardown(j *job, now time.Time) {
	j.Ended = now
	base := now
	if !j.NoExpiration && j.Expiration.Before(base) {
		base = j.Expiration
	}
	j.Deadline = base.Add(j.Grace)
	j.Phase = api.PhaseTeardown
	s.log.Info("teardown started", "job", j.ID, "deadline", j.Deadline, "grace", j.Grace)
	s.watch(j)
	s.armAt(j, j.Deadline, func() { s.overdue(j) })
}

// reopen puts a released job back into teardown with its original deadline
// (an epilogue that arrived after the job looked done).
func (s *Supervisor) reopen(j *job) {
	j.Phase = api.PhaseTeardown
	j.Released = time.Time{}
	j.Outcome = ""
	s.watch(j)
	// A deadline already past fires at once, after the new epilogue started.
	s.armAt(j, j.Deadline, func() { s.overdue(j) })
}

// release ends j's teardown: every process is gone.
func (s *Supervisor) release(j *job) {
	now := s.o.Clock.Now()
	wasOverdue := j.Phase == api.PhaseOverdue
	if wasOverdue {
		// Gone while the latch waited for the first snapshot: the grace
		// was still exceeded.
		s.latchJob(j)
	}
	j.Phase = api.PhaseReleased
	j.Released = now
	if j.timer != nil {
		j.timer.Stop()
		j.timer = nil
	}
	switch {
	case !wasOverdue && !j.Violated:
		j.Outcome = "clean"
	case j.Escalation == escClassified || j.Outcome == diagnose.OutcomeHung:
		j.Outcome = diagnose.OutcomeHung
	case j.Escalation == escKill:
		j.Outcome = diagnose.OutcomeKilled
	case j.Escalation == escTerm:
		j.Outcome = diagnose.OutcomeTerminated
	default:
		j.Outcome = "exited" // went away by itself after the deadline, before any signal
	}
	for _, c := range j.cancels {
		c()
	}
	j.cancels = nil
	if j.Cgroup != "" {
		if err := s.o.Cgroups.Remove(j.Cgroup); err != nil {
			s.log.Warn("cannot remove job cgroup", "job", j.ID, "cgroup", j.Cgroup, "err", err)
		} else {
			j.Cgroup = ""
		}
	}
	os.RemoveAll(s.jobOutDir(j.ID))
	s.log.Info("teardown released", "job", j.ID, "outcome", j.Outcome, "after_end", now.Sub(j.Ended).Round(time.Millisecond))
	s.emit(Event{Kind: EventReleased, Job: j.ID, Outcome: j.Outcome, Duration: now.Sub(j.Ended)})
	if j.Violated {
		if r := j.lastReport; r != nil {
			r.Outcome = j.Outcome
			t := now
			r.Timeline.Released = &t
			if !j.Term.IsZero() {
				tt := j.Term
				r.Timeline.Term = &tt
			}
			if !j.Kill.IsZero() {
				kt := j.Kill
				r.Timeline.Kill = &kt
			}
			if s.o.Reports != nil {
				if path, err := s.o.Reports.Save(r); err == nil {
					j.Report = path
				}
			}
		}
		s.refreshReason()
		s.maybeAutoResume()
	}
	s.pruneReleased()
	s.persist()
}

func (s *Supervisor) pruneReleased() {
	var rel []*job
	for _, j := range s.jobs {
		if j.Phase == api.PhaseReleased && !slices.Contains(s.st.Latch.Jobs, j.ID) {
			rel = append(rel, j)
		}
	}
	if len(rel) <= maxReleased {
		return
	}
	sort.Slice(rel, func(a, b int) bool { return rel[a].Released.Before(rel[b].Released) })
	for _, j := range rel[:len(rel)-maxReleased] {
		delete(s.jobs, j.ID)
	}
}
