package teardown

// A job's teardown from its start to its release: watches, the check for
// emptiness, re-adoption after a restart.

import (
	"os"
	"slices"
	"sort"
	"time"

	"github.com/gracewatch/gracewatch/agent/diagnose"
	"github.com/gracewatch/gracewatch/internal/clock"
)

// v1PollInterval is how often a v1 foreign cgroup is read while its job is
// registered and not released: v1 has no cgroup.events to watch.
const v1PollInterval = time.Second

// What told T_end (job.EndedBy).
const (
	endedByReport = "report" // job end
	endedByEpilog = "epilog" // an epilogue started
	endedByCgroup = "cgroup" // the observed job cgroup emptied
)

// readopt re-arms watches and timers of persisted jobs after a restart.
func (s *Supervisor) readopt() {
	for _, j := range s.jobs {
		if !j.active() && j.Phase != PhaseRunning {
			continue
		}
		s.watch(j)
		if j.Phase == PhaseRunning {
			// A state file of an earlier version has no deadline for a
			// running job: it holds from registration now.
			if j.Deadline.IsZero() && !j.NoExpiration {
				j.Deadline = j.Expiration.Add(j.Grace)
			}
			s.log.Info("re-adopted running job", "job", j.ID, "deadline", j.Deadline, "foreign", j.ForeignName)
			s.armRunning(j)
			s.check(j)
			continue
		}
		if s.o.Reports != nil {
			if r, err := s.o.Reports.Latest(j.ID); err == nil && r != nil {
				j.lastReport = r
			}
		}
		s.log.Info("re-adopted teardown", "job", j.ID, "phase", j.Phase, "deadline", j.Deadline, "escalation", j.Escalation)
		switch {
		case j.Phase == PhaseTeardown:
			s.armAt(j, j.Deadline, func() { s.overdue(j) })
			if s.askTeardown(j) {
				// A question the restart cut short (or never let
				// begin) is asked again now, as the teardown asks as
				// it starts: its answer is in before D, not after it.
				s.askExpiration(j)
			}
		case j.Escalation == escNone:
			if j.Observed && !s.o.Observe {
				// Restarted in enforce mode: a teardown still overdue
				// from observe mode is enforced now (the would_drain
				// list showed it before the switch).
				s.log.Warn("enforce mode: a teardown overdue since observe mode is enforced now", "job", j.ID, "deadline", j.Deadline)
				j.Observed = false
			}
			s.latchJob(j)
			s.escalateTerm(j)
		case j.Escalation == escTerm:
			s.armAfter(j, s.leftOf(j.Term, s.o.KillWait), func() { s.escalateKill(j) })
		case j.Escalation == escKill:
			s.armAfter(j, s.leftOf(j.Kill, s.o.UnkillableAfter), func() { s.classify(j) })
		case j.Escalation == escClassified:
			s.armRecheck(j)
		}
		s.check(j)
	}
}

// armRunning arms the deadline E + G of a running job (docs/DESIGN.md §2: D holds
// from registration, whether or not an end is ever reported); a job without
// an expiration has none until it ends.
func (s *Supervisor) armRunning(j *job) {
	if j.atE != nil {
		j.atE.Stop()
		j.atE = nil
	}
	if j.NoExpiration || j.Deadline.IsZero() {
		if j.timer != nil {
			j.timer.Stop()
			j.timer = nil
		}
		return
	}
	if j.Expiration.After(s.o.Clock.Now().Round(0)) {
		// At E the node turns to teardown (compute): tell it.
		j.atE = clock.At(s.o.Clock, j.Expiration, func() { s.post(s.changed) })
	}
	s.armAt(j, j.Deadline, func() { s.expire(j) })
}

// watch subscribes to the job's cgroups: inotify on the cgroup.events of v2
// ones, a poll of a v1 foreign cgroup (at most once a second, and only from
// here until the job is released).
func (s *Supervisor) watch(j *job) {
	if j.Foreign != "" && j.ForeignV1 && j.poll == nil {
		s.pollV1(j)
	}
	if len(j.cancels) > 0 {
		return
	}
	id := j.ID
	for _, p := range []string{j.Cgroup, j.Foreign} {
		if p == "" || (p == j.Foreign && j.ForeignV1) {
			continue
		}
		cancel, err := s.o.Cgroups.Watch(p, func() { s.markDirty(id) })
		if err != nil {
			// Without its watch (inotify's limit reached, ENOSPC) the
			// cgroup's emptying would be seen only at the deadline, as a
			// violation: poll it as a v1 cgroup instead.
			s.log.Warn("cannot watch cgroup: polling it once a second instead", "job", id, "cgroup", p, "err", err)
			if j.poll == nil {
				s.pollV1(j)
			}
			continue
		}
		j.cancels = append(j.cancels, cancel)
	}
}

// pollV1 arms the next read of j's cgroups (a v1 foreign cgroup, or one
// that could not be watched); each read re-arms it until the job is released (or the supervisor stops: stopRuntime).
func (s *Supervisor) pollV1(j *job) {
	j.poll = s.o.Clock.AfterFunc(v1PollInterval, func() {
		s.post(func() {
			j.poll = nil
			if j.Phase == PhaseReleased || s.jobs[j.ID] != j {
				return
			}
			s.check(j)
			s.changed()
			if j.Phase != PhaseReleased && j.poll == nil {
				s.pollV1(j)
			}
		})
	})
}

// observeForeign reads j's foreign cgroup: whether it holds a process (an
// unreadable one counts as populated: only evidence of emptiness releases),
// and, as a side effect, the pids it lists and whether it was ever seen
// populated.
func (s *Supervisor) observeForeign(j *job) bool {
	if j.Foreign == "" {
		return false
	}
	var pop bool
	var err error
	var pids []int
	if j.ForeignV1 {
		pids, err = s.o.Cgroups.Procs(j.Foreign, true, MaxListedProcesses)
		pop = len(pids) > 0
	} else if pop, err = s.o.Cgroups.Populated(j.Foreign); err == nil && pop {
		pids, err = s.o.Cgroups.Procs(j.Foreign, false, MaxListedProcesses)
	}
	if err != nil {
		// Once per failing streak: a v1 cgroup is read every second.
		if !j.readFailing {
			s.log.Warn("cannot read the job's cgroup", "job", j.ID, "cgroup", j.ForeignName, "err", err)
		}
		j.readFailing = true
		return true
	}
	j.readFailing = false
	j.pids = pids
	if pop && !j.ForeignSeen {
		j.ForeignSeen = true
		s.log.Info("job cgroup populated", "job", j.ID, "cgroup", j.ForeignName, "processes", len(pids))
		s.persist()
	}
	return pop
}

// foreignEmptied reports whether j's foreign cgroup held processes and holds
// none now: the job's end, when no end was reported.
func (s *Supervisor) foreignEmptied(j *job) bool {
	return j.Foreign != "" && !s.observeForeign(j) && j.ForeignSeen
}

// populated reports whether any supervised cgroup of j holds a process. An
// unreadable cgroup counts as populated: only populated 0 (or, for v1, lists
// that are all empty) is proof.
func (s *Supervisor) populated(j *job) bool {
	if j.Cgroup != "" {
		pop, err := s.o.Cgroups.Populated(j.Cgroup)
		if err != nil {
			s.log.Warn("cannot read cgroup events", "job", j.ID, "cgroup", j.Cgroup, "err", err)
			return true
		}
		if pop {
			return true
		}
	}
	return s.observeForeign(j)
}

// check looks at j after a change of its cgroups, an epilogue's exit or a
// poll: a running job whose cgroup emptied has ended; a teardown is released
// once every epilogue is reaped by Wait and every supervised cgroup is
// empty. An overdue job whose end was never reported is released only once
// its end is known (reported, or its cgroup emptied): until then nothing
// says that the job's processes are gone.
func (s *Supervisor) check(j *job) {
	switch {
	case j.Phase == PhaseRunning:
		if !s.foreignEmptied(j) {
			return
		}
		s.log.Info("job cgroup emptied without an end report: the job ended", "job", j.ID, "cgroup", j.ForeignName)
		s.startTeardown(j, s.o.Clock.Now(), endedByCgroup)
	case j.Phase == PhaseOverdue && j.Ended.IsZero():
		if !s.foreignEmptied(j) {
			return
		}
		j.Ended, j.EndedBy = s.o.Clock.Now(), endedByCgroup
		s.log.Info("overdue job's cgroup emptied", "job", j.ID, "cgroup", j.ForeignName)
		s.persist()
	case !j.active():
		return
	}
	if len(j.children) > 0 || s.populated(j) {
		return
	}
	s.release(j)
}

// startTeardown records T_end (told by by) and arms the deadline
// D = min(T_end, E) + G.
func (s *Supervisor) startTeardown(j *job, now time.Time, by string) {
	j.Ended = now
	j.EndedBy = by
	j.Deadline = j.teardownDeadline()
	j.Phase = PhaseTeardown
	s.log.Info("teardown started", "job", j.ID, "user", j.User, "deadline", j.Deadline, "grace", j.Grace, "ended_by", by)
	s.persist()
	s.watch(j)
	s.armAt(j, j.Deadline, func() { s.overdue(j) })
	if s.askTeardown(j) {
		s.askExpiration(j) // it ran past E: did E move? (see askExpiration)
	}
}

// endOverdue records the end of an overdue job whose end was not known,
// when the exec system reports it late (job end, or its epilogue).
func (s *Supervisor) endOverdue(j *job, by string) {
	if j.Phase != PhaseOverdue || !j.Ended.IsZero() {
		return
	}
	j.Ended, j.EndedBy = s.o.Clock.Now(), by
	s.log.Info("end of an overdue job reported", "job", j.ID, "ended_by", by, "deadline", j.Deadline)
	s.persist()
}

// reopen puts a released job back into teardown with its original deadline
// (an epilogue that arrived after the job looked done).
func (s *Supervisor) reopen(j *job) {
	j.Phase = PhaseTeardown
	j.Released = time.Time{}
	j.Outcome = ""
	s.watch(j)
	// A deadline already past fires at once, after the new epilogue started.
	// A job released without ever ending (unreported) gets its end now.
	if j.Ended.IsZero() {
		j.Ended, j.EndedBy = s.o.Clock.Now(), endedByEpilog
	}
	s.armAt(j, j.Deadline, func() { s.overdue(j) })
}

// release ends j's teardown: every process is gone.
func (s *Supervisor) release(j *job) {
	now := s.o.Clock.Now()
	wasOverdue := j.Phase == PhaseOverdue
	if wasOverdue {
		// Gone while the latch waited for the first snapshot: the grace
		// was still exceeded.
		s.latchJob(j)
	}
	j.Phase = PhaseReleased
	j.Released = now
	s.stopTimers(j)
	j.pids = nil
	switch {
	case !wasOverdue && !j.Violated:
		j.Outcome = "clean"
	case j.Ended.IsZero():
		j.Outcome = outcomeUnreported // released by a resume: nothing left to watch, no end ever known
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
			s.log.Warn("cannot remove job cgroup: kept, tried again at the next release", "job", j.ID, "cgroup", j.Cgroup, "err", err)
		} else {
			j.Cgroup = ""
		}
	}
	s.removeLeftovers(j)
	s.out.removeDir(s.jobOutDir(j))
	os.RemoveAll(s.jobOutDir(j))
	var took time.Duration
	if !j.Ended.IsZero() {
		took = now.Sub(j.Ended)
	}
	s.log.Info("teardown released", "job", j.ID, "user", j.User, "command", j.command(), "outcome", j.Outcome,
		"after_end", took.Round(time.Millisecond))
	s.emit(Event{Kind: EventReleased, Job: j.ID, Outcome: j.Outcome, Duration: j.duration()})
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

// removeLeftovers tries again to remove the cgroups of released jobs (but
// just) that could not be removed when they were released: a cgroup is
// busy while the kernel still counts a dying process in it.
func (s *Supervisor) removeLeftovers(just *job) {
	for _, k := range s.jobs {
		if k == just || k.Phase != PhaseReleased || k.Cgroup == "" {
			continue
		}
		if err := s.o.Cgroups.Remove(k.Cgroup); err != nil {
			s.log.Warn("cannot remove job cgroup", "job", k.ID, "cgroup", k.Cgroup, "err", err)
			continue
		}
		s.log.Info("removed a job cgroup left behind", "job", k.ID, "cgroup", k.Cgroup)
		k.Cgroup = ""
	}
}

func (s *Supervisor) pruneReleased() {
	var rel []*job
	for _, j := range s.jobs {
		if j.Phase == PhaseReleased && !slices.Contains(s.st.Latch.Jobs, j.ID) {
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
