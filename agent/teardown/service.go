package teardown

// The job registration calls: the supervisor's side of the socket API
// (agent/api/server.Service, which package agent adapts it to) and of the mesh.

import (
	"context"
	"fmt"
	"time"

	"github.com/gracewatch/gracewatch/agent/request"
)

// DefaultMaxJobs is the default of Options.MaxJobs: the registered jobs
// that are not released. A node runs a few hundred at most; a runaway
// caller gets request.ErrFull instead of growing the agent's memory and state
// file (which is written after every change) without a bound.
const DefaultMaxJobs = 4096

// resolveForeign resolves a cgroup given on the socket API (job start,
// job update, epilog), as an *request.InputError of field "cgroup".
func (s *Supervisor) resolveForeign(spec string) (Foreign, error) {
	if spec == "" {
		return Foreign{}, nil
	}
	f, err := s.o.Cgroups.Resolve(spec)
	if err != nil {
		return Foreign{}, &request.InputError{Field: "cgroup", Msg: err.Error()}
	}
	return f, nil
}

// setForeign makes j observe f (on the main loop).
func (s *Supervisor) setForeign(j *job, f Foreign) {
	j.Foreign, j.ForeignV1, j.ForeignName = f.Path, f.V1, f.Name
	s.stopWatches(j)
	s.watch(j)
	s.observeForeign(j)
}

// stopWatches ends j's cgroup watches (watch adds them again).
func (s *Supervisor) stopWatches(j *job) {
	for _, c := range j.cancels {
		c()
	}
	j.cancels = nil
}

// onLoop runs fn on the main loop and returns its answer; the error of
// the loop (stopped, ctx) comes first.
func (s *Supervisor) onLoop(ctx context.Context, fn func() (Job, error)) (Job, error) {
	var out Job
	var opErr error
	if err := s.do(ctx, func() { out, opErr = fn() }); err != nil {
		return Job{}, err
	}
	return out, opErr
}

// registered counts the jobs that are not released.
func (s *Supervisor) registered() int {
	n := 0
	for _, j := range s.jobs {
		if j.Phase != PhaseReleased {
			n++
		}
	}
	return n
}

// StartJob registers a job (phase running). Its deadline E + G holds from
// now on, whether an end is reported or not.
func (s *Supervisor) StartJob(ctx context.Context, req request.JobStartRequest) (Job, error) {
	if err := request.ValidateJobID(req.Job); err != nil {
		return Job{}, err
	}
	now := s.o.Clock.Now()
	exp, none, err := request.ParseExpiration(req.Expiration, now, s.o.MaxExpirationAge)
	if err != nil {
		return Job{}, err
	}
	grace := s.o.Grace
	if req.Grace != "" {
		if grace, err = request.ParseGrace(req.Grace); err != nil {
			return Job{}, err
		}
	}
	var planGrace time.Duration
	if req.PlanGrace != "" {
		if planGrace, err = request.ParseSchedulerGrace(req.PlanGrace); err != nil {
			return Job{}, err
		}
	}
	foreign, err := s.resolveForeign(req.Cgroup)
	if err != nil {
		return Job{}, err
	}
	user := s.checkUser(req.Job, req.User)
	return s.onLoop(ctx, func() (Job, error) {
		if _, ok := s.jobs[req.Job]; ok {
			return Job{}, fmt.Errorf("job %s: %w", req.Job, request.ErrDuplicateJob)
		}
		if n := s.registered(); n >= s.o.MaxJobs {
			return Job{}, fmt.Errorf("job %s: %w: %d jobs are registered and not released", req.Job, request.ErrFull, n)
		}
		j := &job{ID: req.Job, Expiration: exp, NoExpiration: none, Grace: grace, Registered: now,
			Phase: PhaseRunning, User: user}
		if !none {
			j.Deadline = exp.Add(grace)
		}
		s.jobs[j.ID] = j
		if foreign.Path != "" {
			s.setForeign(j, foreign)
		}
		s.log.Info("job registered", "job", j.ID, "expiration", exp, "no_expiration", none, "grace", grace,
			"deadline", j.Deadline, "cgroup", foreign.Name, "user", user)
		s.emit(Event{Kind: EventRegistered, Job: j.ID})
		if d := planGrace - grace; req.PlanGrace != "" && (d >= time.Millisecond || d <= -time.Millisecond) {
			s.log.Warn("grace mismatch: the scheduler plans this job with another grace than the agent's: the node would be drained at another time than the plan says it is free",
				"job", j.ID, "plan_grace", planGrace.String(), "grace", grace.String())
			s.emit(Event{Kind: EventGraceMismatch, Job: j.ID})
		}
		s.persist()
		s.armRunning(j)
		s.changed()
		return j.view(), nil
	})
}

// EndJob records T_end for a running job. Ending a job already in teardown
// is not an error: exec systems may report the end twice. The end of an
// overdue job whose end was never reported is recorded: from then on, its
// release waits only for its processes.
func (s *Supervisor) EndJob(ctx context.Context, id string) (Job, error) {
	if err := request.ValidateJobID(id); err != nil {
		return Job{}, err
	}
	return s.onLoop(ctx, func() (Job, error) {
		j := s.jobs[id]
		if j == nil {
			return Job{}, fmt.Errorf("job %s: %w", id, request.ErrUnknownJob)
		}
		switch j.Phase {
		case PhaseRunning:
			s.startTeardown(j, s.o.Clock.Now(), endedByReport)
		case PhaseOverdue:
			s.endOverdue(j, endedByReport)
		}
		s.check(j)
		s.changed()
		return j.view(), nil
	})
}

// UpdateJob changes the expiration of a job (its time limit moved in the
// exec system) or adds the cgroup it runs in. It fails with
// request.ErrUnknownJob, request.ErrConflict (released, overdue, another
// cgroup) or a *request.InputError, and then changes nothing.
func (s *Supervisor) UpdateJob(ctx context.Context, id string, req request.JobUpdateRequest) (Job, error) {
	if err := request.ValidateJobID(id); err != nil {
		return Job{}, err
	}
	if req.Expiration == "" && req.Cgroup == "" && req.User == "" {
		return Job{}, &request.InputError{Field: "expiration", Msg: "nothing to update: give an expiration, a cgroup or a user"}
	}
	user, uerr := request.CheckUser(req.User)
	if uerr != nil {
		if req.Expiration == "" && req.Cgroup == "" {
			// Nothing else to change: refusing it loses nothing.
			return Job{}, uerr
		}
		s.log.Warn("job user name refused, the job is supervised without one", "job", id, "err", uerr)
	}
	now := s.o.Clock.Now()
	var exp time.Time
	var none bool
	if req.Expiration != "" {
		var err error
		if exp, none, err = request.ParseExpiration(req.Expiration, now, s.o.MaxExpirationAge); err != nil {
			return Job{}, err
		}
		if !none && exp.Before(now) {
			return Job{}, &request.InputError{Field: "expiration", Msg: fmt.Sprintf(
				"the new expiration %s is %s before now: a time limit can be moved, not into the past",
				exp.UTC().Format(time.RFC3339Nano), now.Sub(exp).Round(time.Millisecond))}
		}
	}
	foreign, err := s.resolveForeign(req.Cgroup)
	if err != nil {
		return Job{}, err
	}
	return s.onLoop(ctx, func() (Job, error) {
		j := s.jobs[id]
		switch {
		case j == nil:
			return Job{}, fmt.Errorf("job %s: %w", id, request.ErrUnknownJob)
		case j.Phase == PhaseReleased:
			return Job{}, fmt.Errorf("job %s: %w: it is released (its teardown ended %s)", id, request.ErrConflict,
				j.Released.UTC().Format(time.RFC3339))
		case j.Phase == PhaseOverdue:
			return Job{}, fmt.Errorf("job %s: %w: it is overdue since its deadline %s and the node is down; check it and resume the node",
				id, request.ErrConflict, j.Deadline.UTC().Format(time.RFC3339))
		case foreign.Path != "" && j.Foreign != "" && j.Foreign != foreign.Path:
			return Job{}, fmt.Errorf("job %s: %w: it already observes cgroup %s", id, request.ErrConflict, j.ForeignName)
		}
		if foreign.Path != "" && j.Foreign == "" {
			s.setForeign(j, foreign)
			s.log.Info("job cgroup added", "job", id, "cgroup", foreign.Name)
		}
		s.setUser(j, user)
		if req.Expiration != "" {
			was, wasNone := j.Expiration, j.NoExpiration
			j.Expiration, j.NoExpiration = exp, none
			switch {
			case j.Phase == PhaseRunning && none:
				j.Deadline = time.Time{}
			case j.Phase == PhaseRunning:
				j.Deadline = exp.Add(j.Grace)
			default:
				j.Deadline = j.teardownDeadline()
				s.armAt(j, j.Deadline, func() { s.overdue(j) })
			}
			if j.Phase == PhaseRunning {
				s.armRunning(j)
			}
			s.log.Info("job expiration moved", "job", id, "was", was, "was_none", wasNone, "expiration", exp,
				"no_expiration", none, "deadline", j.Deadline)
		}
		s.persist()
		s.check(j)
		s.changed()
		return j.view(), nil
	})
}

// Status returns the node status, with the job cgroups' processes as last
// observed.
func (s *Supervisor) Status(ctx context.Context) (Status, error) {
	var out Status
	err := s.do(ctx, func() {
		out = s.status
		if len(out.Jobs) == 0 {
			return
		}
		out.Jobs = make([]Job, len(s.status.Jobs))
		for i, w := range s.status.Jobs {
			if j := s.jobs[w.ID]; j != nil {
				w.Processes = j.view().Processes
			}
			out.Jobs[i] = w
		}
	})
	return out, err
}
