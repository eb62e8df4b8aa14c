package teardown

// What happens at the deadline: overdue, SIGTERM, SIGKILL, classification.

import (
	"fmt"
	"syscall"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/agent/diagnose"
)

// overdue handles the deadline: latch the node DOWN, snapshot, then SIGTERM.
func (s *Supervisor) overdue(j *job) {
	if j.Phase != api.PhaseTeardown {
		return
	}
	if len(j.children) == 0 && !s.populated(j) {
		s.release(j)
		return
	}
	j.Phase = api.PhaseOverdue
	j.Violated = true
	j.Summary = fmt.Sprintf("job %s teardown exceeded grace %v", j.ID, j.Grace)
	s.log.Warn("grace violated", "job", j.ID, "deadline", j.Deadline, "cgroup", j.Cgroup, "foreign", j.Foreign)
	s.emit(Event{Kind: EventOverdue, Job: j.ID})
	s.persist()
	// The node is latched DOWN as soon as the snapshot before the first
	// signal is in, so the DOWN everyone sees first already names what is
	// hung; a snapshot slower than latchWait (its /proc reads are bounded,
	// but may block) does not delay the DOWN beyond it. The snapshot is a
	// single sample, so SIGTERM is not delayed by the sampling interval.
	t := s.o.Clock.AfterFunc(latchWait, func() { s.post(func() { s.latchJob(j); s.changed() }) })
	s.snapshot(j, diagnose.StageBeforeSignal, true, func() {
		t.Stop()
		s.latchJob(j)
		s.escalateTerm(j)
	})
}

func (s *Supervisor) escalateTerm(j *job) {
	if j.Phase != api.PhaseOverdue || j.Escalation != escNone {
		return
	}
	j.Escalation = escTerm
	j.Term = s.o.Clock.Now()
	n := s.signal(j, syscall.SIGTERM)
	s.log.Warn("escalation", "job", j.ID, "signal", "SIGTERM", "processes", n)
	s.emit(Event{Kind: EventEscalation, Job: j.ID, Signal: "SIGTERM"})
	s.persist()
	s.armAt(j, j.Term.Add(s.o.KillWait), func() { s.escalateKill(j) })
}

func (s *Supervisor) escalateKill(j *job) {
	if j.Phase != api.PhaseOverdue || j.Escalation != escTerm {
		return
	}
	j.Escalation = escKill
	j.Kill = s.o.Clock.Now()
	n := 0
	if j.Cgroup != "" {
		k, err := s.o.Cgroups.Kill(j.Cgroup)
		if err != nil {
			s.log.Error("kill failed", "job", j.ID, "cgroup", j.Cgroup, "err", err)
		}
		n += k
	}
	if j.Foreign != "" && s.o.SignalForeign {
		k, err := s.o.Cgroups.Signal(j.Foreign, syscall.SIGKILL)
		if err != nil {
			s.log.Error("kill failed", "job", j.ID, "cgroup", j.Foreign, "err", err)
		}
		n += k
	}
	s.log.Warn("escalation", "job", j.ID, "signal", "SIGKILL", "processes", n)
	s.emit(Event{Kind: EventEscalation, Job: j.ID, Signal: "SIGKILL"})
	s.persist()
	s.armAt(j, j.Kill.Add(s.o.UnkillableAfter), func() { s.classify(j) })
}

func (s *Supervisor) classify(j *job) {
	if j.Phase != api.PhaseOverdue || j.Escalation != escKill {
		return
	}
	j.Escalation = escClassified
	// A second SIGKILL pass first: a process the first pass missed (forked
	// meanwhile, or listed late) is "missed", and kill(2) is its remedy.
	if j.Cgroup != "" {
		if _, err := s.o.Cgroups.Kill(j.Cgroup); err != nil {
			s.log.Error("kill failed", "job", j.ID, "cgroup", j.Cgroup, "err", err)
		}
	}
	s.persist()
	s.snapshot(j, diagnose.StageAfterEscalation, false, nil)
}

func (s *Supervisor) signal(j *job, sig syscall.Signal) int {
	n := 0
	for _, p := range []string{j.Cgroup, j.Foreign} {
		if p == "" || (p == j.Foreign && !s.o.SignalForeign) {
			continue
		}
		k, err := s.o.Cgroups.Signal(p, sig)
		if err != nil {
			s.log.Error("signal failed", "job", j.ID, "cgroup", p, "signal", sig.String(), "err", err)
		}
		n += k
	}
	return n
}
