package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
	apiserver "github.com/gracewatch/gracewatch/agent/api/server"
	"github.com/gracewatch/gracewatch/agent/diagnose"
	"github.com/gracewatch/gracewatch/agent/request"
)

// fakeService answers the CLI. Its RunEpilog really runs argv with os/exec;
// argv[0] "abort" instead drops the connection after some output.
type fakeService struct {
	mu       sync.Mutex
	starts   []request.JobStartRequest
	updates  []request.JobUpdateRequest
	epilogs  []request.EpilogRequest
	calls    int
	err      error
	job      api.Job
	status   api.Status
	reports  []*diagnose.Report
	ctxEnded chan struct{} // closed when an epilog's context ends early
}

func (f *fakeService) called() {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
}

// checkCalled checks what a job command asked of the agent: nothing after
// a usage error (exit 2), and only want (when not nil) as its one request.
// got is the fake's record of that kind of request, read under its lock.
func checkCalled[R comparable](t *testing.T, calls, code int, got []R, want *R) {
	t.Helper()
	if code == 2 && calls != 0 {
		t.Errorf("usage error but the agent was called")
	}
	if want != nil && (len(got) != 1 || got[0] != *want) {
		t.Errorf("requests %+v; want %+v", got, *want)
	}
}

func (f *fakeService) StartJob(ctx context.Context, req request.JobStartRequest) (api.Job, error) {
	f.mu.Lock()
	f.starts = append(f.starts, req)
	f.mu.Unlock()
	f.called()
	if f.err != nil {
		return api.Job{}, f.err
	}
	job := f.job
	job.ID = req.Job
	return job, nil
}

func (f *fakeService) EndJob(ctx context.Context, id string) (api.Job, error) {
	f.called()
	job := f.job
	job.ID = id
	return job, f.err
}

func (f *fakeService) UpdateJob(ctx context.Context, id string, req request.JobUpdateRequest) (api.Job, error) {
	f.called()
	f.mu.Lock()
	f.updates = append(f.updates, req)
	f.mu.Unlock()
	job := f.job
	job.ID = id
	return job, f.err
}

func (f *fakeService) Status(ctx context.Context) (api.Status, error) {
	f.called()
	return f.status, f.err
}

func (f *fakeService) Diagnose(ctx context.Context, job string) ([]*diagnose.Report, error) {
	f.called()
	return f.reports, f.err
}

func (f *fakeService) Resume(ctx context.Context, req request.ResumeRequest) (api.Status, error) {
	f.called()
	return f.status, f.err
}

// lockedSink serializes the output of the two pipes, as the OutputSink
// contract asks.
type lockedSink struct {
	mu    *sync.Mutex
	write func([]byte) error
}

func (s lockedSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.write(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

var _ io.Writer = lockedSink{}

func (f *fakeService) RunEpilog(ctx context.Context, id string, req request.EpilogRequest, out request.OutputSink) (int, error) {
	f.mu.Lock()
	f.epilogs = append(f.epilogs, req)
	f.mu.Unlock()
	f.called()
	if f.err != nil {
		return 0, f.err
	}
	if req.Argv[0] == "abort" {
		_ = out.Stdout([]byte("partial\n"))
		panic(http.ErrAbortHandler)
	}
	var mu sync.Mutex
	cmd := exec.Command(req.Argv[0], req.Argv[1:]...)
	cmd.Env, cmd.Dir = req.Env, req.Dir
	cmd.Stdout = lockedSink{&mu, out.Stdout}
	cmd.Stderr = lockedSink{&mu, out.Stderr}
	if err := cmd.Start(); err != nil {
		return 0, &request.InputError{Field: "argv", Msg: err.Error()}
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-ctx.Done():
		// The client left; a real supervisor goes on. The fake kills
		// its process so that the test leaves nothing behind.
		close(f.ctxEnded)
		_ = cmd.Process.Kill()
		<-done
		return 0, ctx.Err()
	}
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ws.ExitStatus(), nil
}

// serve runs svc on a socket in a short temporary directory.
func serve(t *testing.T, svc *fakeService) string {
	t.Helper()
	if svc.ctxEnded == nil {
		svc.ctxEnded = make(chan struct{})
	}
	dir, err := os.MkdirTemp("", "gw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "agent.sock")
	l, err := apiserver.Listen(socket, "")
	if err != nil {
		t.Fatal(err)
	}
	srv := apiserver.NewServer(svc, apiserver.ServerOptions{})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return socket
}
