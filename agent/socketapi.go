package agent

// The socket API's edge: agent/api speaks its own wire types (a promise to
// exec systems and the CLI), the supervisor its own (agent/teardown,
// model.go); this adapter is the one place they meet.

import (
	"context"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
	apiserver "github.com/gracewatch/gracewatch/agent/api/server"
	"github.com/gracewatch/gracewatch/agent/report"
	"github.com/gracewatch/gracewatch/agent/request"
	"github.com/gracewatch/gracewatch/agent/teardown"
)

// socketService serves the socket API from the supervisor. It is safe for
// concurrent use, as the supervisor is.
type socketService struct{ sup *teardown.Supervisor }

var _ apiserver.Service = socketService{}

func (s socketService) StartJob(ctx context.Context, req request.JobStartRequest) (api.Job, error) {
	j, err := s.sup.StartJob(ctx, req)
	return wireJob(j), err
}

func (s socketService) EndJob(ctx context.Context, id string) (api.Job, error) {
	j, err := s.sup.EndJob(ctx, id)
	return wireJob(j), err
}

func (s socketService) UpdateJob(ctx context.Context, id string, req request.JobUpdateRequest) (api.Job, error) {
	j, err := s.sup.UpdateJob(ctx, id, req)
	return wireJob(j), err
}

func (s socketService) RunEpilog(ctx context.Context, id string, req request.EpilogRequest, out request.OutputSink) (int, error) {
	return s.sup.RunEpilog(ctx, id, req, out)
}

func (s socketService) Status(ctx context.Context) (api.Status, error) {
	st, err := s.sup.Status(ctx)
	return wireStatus(st), err
}

func (s socketService) Diagnose(ctx context.Context, job string) ([]*report.Report, error) {
	return s.sup.Diagnose(ctx, job)
}

func (s socketService) Resume(ctx context.Context, req request.ResumeRequest) (api.Status, error) {
	st, err := s.sup.Resume(ctx, req)
	return wireStatus(st), err
}

// wireStatus is the socket API's form of a status.
func wireStatus(st teardown.Status) api.Status {
	w := api.Status{Node: st.Node, State: string(st.State), Reason: st.Reason, Since: st.Since, FreeAt: timePtr(st.FreeAt),
		Seq: st.Seq, Incarnation: st.Incarnation, Jobs: make([]api.Job, len(st.Jobs)), Hung: make([]api.Hung, len(st.Hung))}
	for i, j := range st.Jobs {
		w.Jobs[i] = wireJob(j)
	}
	for i, h := range st.Hung {
		w.Hung[i] = api.Hung(h)
	}
	if e := st.StateFile; e != nil {
		w.StateFile = &api.StateFileError{Path: e.Path, Error: e.Error, Since: e.Since, Failures: e.Failures}
	}
	return w
}

// wireJob is the socket API's form of a job.
func wireJob(j teardown.Job) api.Job {
	return api.Job{ID: j.ID, Phase: string(j.Phase), Expiration: timePtr(j.Expiration), Grace: j.Grace.String(),
		Ended: timePtr(j.Ended), EndedBy: j.EndedBy, Deadline: timePtr(j.Deadline), Cgroup: j.Cgroup,
		Foreign: j.Foreign, ForeignName: j.ForeignName, Processes: j.Processes, Epilogs: j.Epilogs,
		Escalation: j.Escalation, Outcome: j.Outcome, Released: timePtr(j.Released), User: j.User, Command: j.Command}
}

// timePtr is t, or nil for the zero time (JSON null or omitted).
func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
