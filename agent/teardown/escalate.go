package teardown

// What happens at the deadline: overdue, SIGTERM, SIGKILL, classification.

import (
	"fmt"
	"syscall"
	"time"

	"github.com/gracewatch/gracewatch/agent/diagnose"
	"github.com/gracewatch/gracewatch/agent/request"
)

// outcomeUnreported is the outcome of an overdue job whose end was never
// known, released when an administrator resumed the node and nothing was
// left to watch.
const outcomeUnreported = "unreported"

// expire handles the deadline E + G of a job still running: no end was
// reported by it. A job whose observed cgroup emptied has ended (its
// emptying was missed between two polls); otherwise, once per expiration,
// the exec system is asked whether E moved (Options.Expirations) before
// the job is made overdue.
func (s *Supervisor) expire(j *job) {
	if j.Phase != PhaseRunning || j.asking {
		return
	}
	if s.foreignEmptied(j) {
		s.check(j)
		return
	}
	if s.o.Expirations != nil && !j.Asked.Equal(j.Expiration) {
		s.askExpiration(j)
		return
	}
	s.overdueRunning(j)
}

// askExpiration runs the site's expiration command for j off the main loop
// and, back on it, re-arms the deadline if E moved later (the time limit
// was extended in the exec system alone), or makes the job overdue. A
// command that fails, hangs (it is bounded by its timeout) or prints
// garbage is logged and changes nothing but the latch it did not prevent.
//
// It serves a job still running at E + G (expire) and a teardown whose job
// ended after E (startTeardown, or overdue after a restart): a job that ran
// past the E the agent was told was not ended there by its exec system,
// whose own E may be later (a limit extended there alone, or a Flux job
// planned with G whose resource-update to the user's E never came because
// the jobtap plugin was removed): its teardown's D = min(T_end, E) + G
// would leave it less grace, or none. A teardown asks as it starts, so
// that the answer is in before D; at D, a question still open holds the
// latch until it is answered (bounded by the command's timeout).
func (s *Supervisor) askExpiration(j *job) {
	j.asking = true
	was, phase := j.Expiration, j.Phase
	// Until the answer, the latch may wait for it until then (Job.Held),
	// which the aggregators' central deadline follows: on a slow machine
	// the command can outlast D of the stale E (a teardown's, or a
	// running job's E + G, whose end may come while it is asked).
	j.askUntil = s.o.Clock.Now().Add(s.o.Expirations.Timeout())
	s.changed()
	ctx := s.ctx
	go func() {
		out, err := s.o.Expirations.Expiration(ctx, j.ID)
		s.post(func() {
			j.asking, j.askUntil = false, time.Time{}
			if ctx.Err() != nil {
				// The agent stops: the question was cut short, not
				// answered. Recorded as asked, it would not be asked
				// again after the restart (readopt).
				return
			}
			defer s.changed() // the deadline told while asking is over
			if j.Phase != phase || !j.Expiration.Equal(was) || j.NoExpiration {
				// Ended, released, or updated meanwhile: that word is
				// newer. A teardown whose deadline came meanwhile is
				// judged now.
				s.overdueIfDue(j)
				return
			}
			j.Asked = was
			s.persist()
			now := s.o.Clock.Now()
			if err == nil {
				var e time.Time
				var none bool
				e, none, err = request.ParseExpiration(out, now, s.o.MaxExpirationAge)
				switch {
				case err != nil:
					err = fmt.Errorf("answer %s: %w", clipText(out), err)
				case none:
					s.log.Info("expiration command: the job has no time limit any more", "job", j.ID, "was", was)
					j.NoExpiration, j.Expiration = true, time.Time{}
					s.rearm(j)
					return
				case e.After(was) && e.Add(j.Grace).After(now):
					s.log.Info("expiration command: the job's expiration moved; deadline re-armed", "job", j.ID,
						"was", was, "expiration", e, "deadline", e.Add(j.Grace))
					j.Expiration = e
					s.rearm(j)
					return
				default:
					s.log.Info("expiration command: the expiration did not move", "job", j.ID, "expiration", e)
				}
			}
			if err != nil {
				s.log.Warn("expiration command failed; the deadline holds", "job", j.ID, "err", err)
			}
			if phase == PhaseRunning {
				s.overdueRunning(j)
				s.changed()
				return
			}
			s.overdueIfDue(j)
		})
	}()
}

// askTeardown reports whether j's teardown must ask the exec system for
// its E (askExpiration): its job ended after the E not yet asked about.
func (s *Supervisor) askTeardown(j *job) bool {
	return s.o.Expirations != nil && !j.asking && !j.NoExpiration && !j.Expiration.IsZero() &&
		j.Ended.After(j.Expiration) && !j.Asked.Equal(j.Expiration)
}

// overdueIfDue judges a teardown whose deadline has passed.
func (s *Supervisor) overdueIfDue(j *job) {
	if j.Phase == PhaseTeardown && !s.o.Clock.Now().Before(j.Deadline) {
		s.overdue(j)
	}
}

// rearm arms j's deadline again after its E moved (askExpiration): a
// running job's E + G, a teardown's min(T_end, E) + G, which may be past
// already (then it is overdue at once).
func (s *Supervisor) rearm(j *job) {
	if j.Phase == PhaseRunning {
		j.Deadline = time.Time{}
		if !j.NoExpiration {
			j.Deadline = j.Expiration.Add(j.Grace)
		}
		s.armRunning(j)
	} else {
		j.Deadline = j.teardownDeadline()
		s.log.Info("teardown deadline re-armed", "job", j.ID, "deadline", j.Deadline)
		s.persist()
		s.armAt(j, j.Deadline, func() { s.overdue(j) })
	}
	s.changed()
}

// clipText quotes a text from outside for a message, bounded.
func clipText(s string) string {
	const max = 80
	if len(s) > max {
		return fmt.Sprintf("%q... (%d bytes)", s[:max], len(s))
	}
	return fmt.Sprintf("%q", s)
}

// overdueRunning makes a job overdue whose end was not reported by its
// deadline E + G: exactly as a teardown that exceeds its grace, with the
// job's own processes (its observed cgroup) as what is hung, or, with
// nothing to observe, "no end reported by the deadline".
func (s *Supervisor) overdueRunning(j *job) {
	if j.Phase != PhaseRunning {
		return
	}
	j.Phase = PhaseOverdue
	j.Violated = true
	j.Summary = diagnose.NoEndSummary(j.ID, j.Grace.String())
	s.log.Warn("no end reported by the deadline", "job", j.ID, "expiration", j.Expiration, "deadline", j.Deadline,
		"cgroup", j.ForeignName, "processes", len(j.pids))
	s.escalate(j)
}

// overdue handles the deadline of a teardown: latch the node DOWN,
// snapshot, then SIGTERM.
func (s *Supervisor) overdue(j *job) {
	if j.Phase != PhaseTeardown || j.asking {
		return
	}
	if len(j.children) == 0 && !s.populated(j) {
		s.release(j)
		return
	}
	if s.askTeardown(j) {
		s.askExpiration(j) // it ran past E: did E move? (see askExpiration)
		return
	}
	j.Phase = PhaseOverdue
	if !j.Violated {
		// An epilogue that came after the job's violation was judged
		// (reopen) keeps that judgement: the job is one violation.
		j.Summary = fmt.Sprintf("job %s teardown exceeded grace %v", j.ID, j.Grace)
	}
	j.Violated = true
	s.log.Warn("grace violated", "job", j.ID, "deadline", j.Deadline, "cgroup", j.Cgroup, "foreign", j.Foreign)
	s.escalate(j)
}

// escalate starts the escalation of a job that just became overdue.
func (s *Supervisor) escalate(j *job) {
	if s.o.Observe {
		s.observeOverdue(j)
		return
	}
	s.emit(Event{Kind: EventOverdue, Job: j.ID})
	s.persist()
	// The node is latched DOWN as soon as the snapshot before the first
	// signal is in, so the DOWN everyone sees first already names what is
	// hung; a snapshot slower than latchWait (its /proc reads are bounded,
	// but may block) does not delay the DOWN beyond it. The snapshot is a
	// single sample, so SIGTERM is not delayed by the sampling interval.
	// Until it lands, the job is told as judged by then (Job.Held): a
	// judgement made past D (the answer to an expiration question came
	// late) must not be told meanwhile with the D already past, which an
	// aggregator would take as a silent node (the central deadline).
	j.latchBy = s.o.Clock.Now().Add(latchWait)
	t := s.o.Clock.AfterFunc(latchWait, func() { s.post(func() { s.latchJob(j); s.changed() }) })
	s.snapshot(j, diagnose.StageBeforeSignal, true, func() {
		t.Stop()
		s.latchJob(j)
		s.escalateTerm(j)
	})
}

// observeOverdue is escalate in observe mode: the job is overdue and
// diagnosed (its report says what would have been signalled, and the
// node's status carries it as a would-be violation), but no signal is
// sent and nothing is latched while the agent observes: the job stays
// Observed until its processes end by themselves. An agent restarted in
// enforce mode meanwhile enforces it at once (lifecycle.go): enforce mode
// never serves a node as tearing down past its deadline.
func (s *Supervisor) observeOverdue(j *job) {
	j.Observed = true
	s.log.Warn("would drain (observe mode): no signal sent, node not latched", "job", j.ID, "deadline", j.Deadline,
		"summary", j.Summary)
	s.emit(Event{Kind: EventOverdue, Job: j.ID, Observed: true})
	s.persist()
	s.snapshot(j, diagnose.StageBeforeSignal, true, nil)
}

func (s *Supervisor) escalateTerm(j *job) {
	if j.Phase != PhaseOverdue || j.Escalation != escNone || j.Observed {
		return
	}
	if s.o.Observe {
		// Restarted in observe mode with a job overdue from enforce mode
		// whose escalation had not begun: it is observed from now on.
		j.Observed = true
		s.persist()
		return
	}
	j.Escalation = escTerm
	j.Term = s.o.Clock.Now()
	if r := j.lastReport; r != nil {
		r.Outcome = diagnose.OutcomeEscalated
	}
	n := s.signal(j, syscall.SIGTERM)
	s.log.Warn("escalation", "job", j.ID, "signal", "SIGTERM", "processes", n)
	s.emit(Event{Kind: EventEscalation, Job: j.ID, Signal: "SIGTERM"})
	s.persist()
	s.armAfter(j, s.o.KillWait, func() { s.escalateKill(j) })
}

func (s *Supervisor) escalateKill(j *job) {
	if j.Phase != PhaseOverdue || j.Escalation != escTerm || s.o.Observe {
		return // observe mode sends no signal, not even to finish an escalation begun in enforce mode
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
	s.armAfter(j, s.o.UnkillableAfter, func() { s.classify(j) })
}

func (s *Supervisor) classify(j *job) {
	if j.Phase != PhaseOverdue || j.Escalation != escKill {
		return
	}
	j.Escalation = escClassified
	// A second SIGKILL pass first: a process the first pass missed (forked
	// meanwhile, or listed late) is "missed", and kill(2) is its remedy.
	if j.Cgroup != "" && !s.o.Observe {
		if _, err := s.o.Cgroups.Kill(j.Cgroup); err != nil {
			s.log.Error("kill failed", "job", j.ID, "cgroup", j.Cgroup, "err", err)
		}
	}
	s.persist()
	s.snapshot(j, diagnose.StageAfterEscalation, false, nil)
	s.armRecheck(j)
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
