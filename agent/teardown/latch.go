package teardown

// The node's DOWN latch: set by violations and drains, cleared by resume
// or, when allowed, by a clean end.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gracewatch/gracewatch/agent/diagnose"
	"github.com/gracewatch/gracewatch/agent/request"
)

// latchJob latches the node DOWN for overdue job j, once.
func (s *Supervisor) latchJob(j *job) {
	j.latchBy = time.Time{}
	if j.Latched || j.Acknowledged || j.Observed || j.Phase != PhaseOverdue {
		return
	}
	j.Latched = true
	s.latchDown("grace", j.Summary, j.ID)
	s.persist()
}

// latchDown latches the node DOWN for a violation of job id.
func (s *Supervisor) latchDown(kind, reason, id string) {
	l := &s.st.Latch
	if !l.Down {
		l.Down = true
		l.Kind = kind
		l.Since = s.o.Clock.Now()
		l.Reason = reason
	}
	if id != "" && !slices.Contains(l.Jobs, id) {
		l.Jobs = append(l.Jobs, id)
	}
	s.refreshReason()
}

// refreshReason rebuilds the latch reason from the violating jobs' summaries.
func (s *Supervisor) refreshReason() {
	l := &s.st.Latch
	if !l.Down || l.Kind != "grace" {
		return
	}
	var parts []string
	for _, id := range l.Jobs {
		j := s.jobs[id]
		if j == nil {
			continue
		}
		p := j.Summary
		switch j.Outcome {
		case diagnose.OutcomeTerminated:
			p += "; terminated by SIGTERM"
		case diagnose.OutcomeKilled:
			p += "; killed by SIGKILL"
		case "exited":
			p += "; exited after the deadline"
		}
		if j.Phase == PhaseReleased && !j.Released.IsZero() {
			// Only the latch is left: say so, and what clears it.
			p += fmt.Sprintf("; gone since %s, resume to clear", j.Released.UTC().Format("15:04:05Z"))
		}
		parts = append(parts, p)
	}
	if len(parts) > 0 {
		l.Reason = boundReason(strings.Join(parts, " | "))
	}
}

// MaxReasonBytes bounds the node's reason (the latch's), which the status,
// the state file, the mesh and the schedulers' reasons carry: the parts of
// several violations and drains beyond it are cut, with reasonCut at the
// end.
const MaxReasonBytes = 1024

// reasonCut ends a reason that was cut to MaxReasonBytes.
const reasonCut = " …(cut)"

// boundReason cuts r to MaxReasonBytes, at a rune boundary, marked.
func boundReason(r string) string {
	if len(r) <= MaxReasonBytes {
		return r
	}
	cut := MaxReasonBytes - len(reasonCut)
	for cut > 0 && !utf8.RuneStart(r[cut]) {
		cut--
	}
	return r[:cut] + reasonCut
}

// drainedWith reports whether reason, a latch's, already holds a drain
// with the reason text, whoever asked for it.
func drainedWith(reason, text string) bool {
	for _, part := range strings.Split(reason, " | ") {
		if strings.HasPrefix(part, "drained") && (strings.HasSuffix(part, ": "+text) || part == "drained: "+text) {
			return true
		}
	}
	return false
}

// maybeAutoResume clears a grace latch once every violating job is released,
// when the site allows it.
func (s *Supervisor) maybeAutoResume() {
	l := &s.st.Latch
	if s.o.AutoResume != AutoResumeWhenClean || !l.Down || l.Kind != "grace" {
		return
	}
	for _, id := range l.Jobs {
		if j := s.jobs[id]; j != nil && j.Phase != PhaseReleased {
			return
		}
	}
	s.log.Info("node auto-resumed: every process of the violating teardowns is gone", "jobs", l.Jobs, "was", l.Reason)
	s.st.Latch = latch{}
}

// Resume clears the DOWN latch. Overdue jobs stay supervised but no longer
// hold the node.
func (s *Supervisor) Resume(ctx context.Context, req request.ResumeRequest) (Status, error) {
	if strings.TrimSpace(req.Reason) == "" {
		return Status{}, &request.InputError{Field: "reason", Msg: "a reason is required"}
	}
	who := "unknown peer"
	if p, ok := request.PeerFrom(ctx); ok {
		who = fmt.Sprintf("uid %d pid %d", p.UID, p.PID)
	}
	var out Status
	err := s.do(ctx, func() {
		if s.st.Latch.Down {
			s.log.Warn("node resumed", "by", who, "reason", req.Reason, "was", s.st.Latch.Reason)
		}
		s.st.Latch = latch{}
		for _, j := range s.jobs {
			if j.Phase != PhaseOverdue {
				continue
			}
			j.Acknowledged = true
			// A job whose end was never known and that has nothing left to
			// watch would otherwise stay overdue for ever: the resume is
			// the administrator's word that it is over.
			if j.Ended.IsZero() && len(j.children) == 0 && !s.populated(j) {
				s.release(j)
			}
		}
		s.changed()
		s.persist()
		out = s.status
	})
	return out, err
}

// Drain latches the node DOWN on an administrator's word. Like a grace
// violation it holds until Resume; auto_resume never clears it.
func (s *Supervisor) Drain(ctx context.Context, reason, by string) (Status, error) {
	if err := request.ValidateReason(reason); err != nil {
		return Status{}, err
	}
	var out Status
	err := s.do(ctx, func() {
		l := &s.st.Latch
		text := "drained"
		if by != "" {
			text += " by " + by
		}
		text += ": " + reason
		switch {
		case !l.Down:
			*l = latch{Down: true, Kind: "drain", Since: s.o.Clock.Now(), Reason: boundReason(text)}
		case drainedWith(l.Reason, reason):
			// The same drain again (an aggregator's retry, an operator's
			// loop, several aggregators): the reason already says it, and
			// the callers would only grow it (issue 11: 460 drains made a
			// 117 KB reason).
			l.Kind = "drain"
			s.log.Info("node drained again with the same reason", "by", by, "reason", reason)
			s.changed()
			out = s.status
			return
		default:
			// A drain on top of a violation or of another drain: the first
			// reason stays first, and only a resume clears the latch.
			l.Kind = "drain"
			l.Reason = boundReason(l.Reason + " | " + text)
		}
		s.log.Warn("node drained", "by", by, "reason", reason)
		s.changed()
		s.persist()
		out = s.status
	})
	return out, err
}

// latchCause returns the cause of the latched violations (the worst of
// their jobs' latest reports, by class, then the latest) and whether the
// node is clean: down for grace violations only, each of whose jobs is
// released (its processes gone) or no longer known.
func (s *Supervisor) latchCause() (*diagnose.Cause, bool) {
	l := &s.st.Latch
	clean := l.Kind == "grace" && len(l.Jobs) > 0
	jobs := make([]*job, 0, len(l.Jobs))
	for _, id := range l.Jobs {
		j := s.jobs[id]
		if j == nil {
			continue
		}
		if j.Phase != PhaseReleased {
			clean = false
		}
		jobs = append(jobs, j)
	}
	return worstCause(jobs), clean
}

// observedCause is latchCause for observe mode: the worst cause of the
// jobs overdue without a latch (Observed); nil when none names one.
func (s *Supervisor) observedCause() *diagnose.Cause {
	var jobs []*job
	for _, j := range s.jobs {
		if j.Observed && j.Phase == PhaseOverdue {
			jobs = append(jobs, j)
		}
	}
	return worstCause(jobs)
}

// worstCause returns the worst cause of the jobs' latest reports, by
// class, then the latest; nil when none names one.
func worstCause(jobs []*job) *diagnose.Cause {
	var best *diagnose.Cause
	var bestTaken time.Time
	for _, j := range jobs {
		if j.lastReport == nil {
			continue
		}
		c := diagnose.CauseOf(j.lastReport)
		if c.Empty() {
			continue
		}
		if best == nil || c.Class.Severity() > best.Class.Severity() ||
			(c.Class.Severity() == best.Class.Severity() && j.lastReport.Taken.After(bestTaken)) {
			best, bestTaken = &c, j.lastReport.Taken
		}
	}
	return best
}
