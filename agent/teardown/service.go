package teardown

// The job registration calls of api.Service.

import (
	"context"
	"fmt"

	"github.com/gracewatch/gracewatch/agent/api"
)

var _ api.Service = (*Supervisor)(nil)

// StartJob registers a job (phase running).
func (s *Supervisor) StartJob(ctx context.Context, req api.JobStartRequest) (api.Job, error) {
	if err := api.ValidateJobID(req.Job); err != nil {
		return api.Job{}, err
	}
	now := s.o.Clock.Now()
	exp, none, err := api.ParseExpiration(req.Expiration, now, s.o.MaxExpirationAge)
	if err != nil {
		return api.Job{}, err
	}
	grace := s.o.Grace
	if req.Grace != "" {
		if grace, err = api.ParseGrace(req.Grace); err != nil {
			return api.Job{}, err
		}
	}
	foreign := ""
	if req.Cgroup != "" {
		if foreign, err = s.o.Cgroups.Resolve(req.Cgroup); err != nil {
			return api.Job{}, &api.InputError{Field: "cgroup", Msg: err.Error()}
		}
	}
	var out api.Job
	var opErr error
	err = s.do(ctx, func() {
		if _, ok := s.jobs[req.Job]; ok {
			opErr = fmt.Errorf("job %s: %w", req.Job, api.ErrDuplicateJob)
			return
		}
		j := &job{ID: req.Job, Expiration: exp, NoExpiration: none, Grace: grace, Registered: now,
			Phase: api.PhaseRunning, Foreign: foreign}
		s.jobs[j.ID] = j
		s.watch(j)
		s.log.Info("job registered", "job", j.ID, "expiration", exp, "no_expiration", none, "grace", grace, "foreign", foreign)
		s.emit(Event{Kind: EventRegistered, Job: j.ID})
		s.changed()
		out = j.wire()
	})
	if err != nil {
		return api.Job{}, err
	}
	return out, opErr
}

// EndJob records T_end for a running job. Ending a job already in teardown
// is not an error: exec systems may report the end twice.
func (s *Supervisor) EndJob(ctx context.Context, id string) (api.Job, error) {
	if err := api.ValidateJobID(id); err != nil {
		return api.Job{}, err
	}
	var out api.Job
	var opErr error
	err := s.do(ctx, func() {
		j := s.jobs[id]
		if j == nil {
			opErr = fmt.Errorf("job %s: %w", id, api.ErrUnknownJob)
			return
		}
		if j.Phase == api.PhaseRunning {
			s.startTeardown(j, s.o.Clock.Now())
			s.check(j)
			s.changed()
		}
		out = j.wire()
	})
	if err != nil {
		return api.Job{}, err
	}
	return out, opErr
}

// Status returns the node status.
func (s *Supervisor) Status(ctx context.Context) (api.Status, error) {
	var out api.Status
	err := s.do(ctx, func() { out = s.status })
	return out, err
}
