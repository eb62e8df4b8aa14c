package server

import (
	"context"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/agent/report"
	"github.com/gracewatch/gracewatch/agent/request"
)

// call is one call the fake service received.
type call struct {
	Method  string
	Arg     any
	Peer    request.Peer
	HasPeer bool
}

// fakeService records calls and answers with canned values, or with Err
// when it is set. Epilog, when set, implements RunEpilog.
type fakeService struct {
	mu    sync.Mutex
	calls []call

	Err     error
	Job     api.Job
	Status_ api.Status
	Reports []*report.Report
	Epilog  func(ctx context.Context, id string, req request.EpilogRequest, out request.OutputSink) (int, error)
}

var _ Service = (*fakeService)(nil)

func (f *fakeService) record(ctx context.Context, method string, arg any) {
	p, ok := request.PeerFrom(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call{Method: method, Arg: arg, Peer: p, HasPeer: ok})
}

func (f *fakeService) Calls() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

func (f *fakeService) StartJob(ctx context.Context, req request.JobStartRequest) (api.Job, error) {
	f.record(ctx, "StartJob", req)
	return f.Job, f.Err
}

func (f *fakeService) EndJob(ctx context.Context, id string) (api.Job, error) {
	f.record(ctx, "EndJob", id)
	return f.Job, f.Err
}

func (f *fakeService) UpdateJob(ctx context.Context, id string, req request.JobUpdateRequest) (api.Job, error) {
	f.record(ctx, "UpdateJob", req)
	return f.Job, f.Err
}

func (f *fakeService) RunEpilog(ctx context.Context, id string, req request.EpilogRequest, out request.OutputSink) (int, error) {
	f.record(ctx, "RunEpilog", req)
	if f.Err != nil {
		return 0, f.Err
	}
	if f.Epilog == nil {
		return 0, nil
	}
	return f.Epilog(ctx, id, req, out)
}

func (f *fakeService) Status(ctx context.Context) (api.Status, error) {
	f.record(ctx, "Status", nil)
	return f.Status_, f.Err
}

func (f *fakeService) Diagnose(ctx context.Context, job string) ([]*report.Report, error) {
	f.record(ctx, "Diagnose", job)
	return f.Reports, f.Err
}

func (f *fakeService) Resume(ctx context.Context, req request.ResumeRequest) (api.Status, error) {
	f.record(ctx, "Resume", req)
	return f.Status_, f.Err
}

// shortTempDir returns a temporary directory with a path short enough for
// a Unix socket (t.TempDir's can exceed 107 bytes), traversable by other
// users (0755) so that a peer of another uid can reach a socket in it.
func shortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gw")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// testServer is a Server on a real socket in a temporary directory.
type testServer struct {
	srv    *Server
	socket string
	client *api.Client
	done   chan error
}

// startServer serves svc on a new socket; group is the socket's group ("" for
// none). It stops at the end of the test.
func startServer(t *testing.T, svc Service, opts ServerOptions, group string) *testServer {
	t.Helper()
	dir := shortTempDir(t)
	socket := dir + "/agent.sock"
	l, err := Listen(socket, group)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	ts := &testServer{srv: NewServer(svc, opts), socket: socket, client: api.NewClient(socket), done: make(chan error, 1)}
	go func() { ts.done <- ts.srv.Serve(l) }()
	t.Cleanup(func() {
		ts.client.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := ts.srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-ts.done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return ts
}

// rawClient returns a plain HTTP client of the socket, for requests the
// Client would never send.
func rawClient(socket string) *http.Client {
	var d net.Dialer
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return d.DialContext(ctx, "unix", socket) },
	}}
}

// testNow is the time the decoding tests check expirations against.
var testNow = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
