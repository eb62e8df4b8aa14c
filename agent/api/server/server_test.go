package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/agent/diagnose"
	"github.com/gracewatch/gracewatch/agent/report"
	"github.com/gracewatch/gracewatch/agent/request"
)

// testLogger logs through t.Log until the test ends.
func testLogger(t *testing.T) *slog.Logger {
	w := &tWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *tWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

func TestRoutes(t *testing.T) {
	exp := time.Date(2024, 5, 1, 13, 0, 0, 0, time.UTC)
	job := api.Job{ID: "42", Phase: api.PhaseRunning, Expiration: &exp, Grace: "2m0s"}
	st := api.Status{Node: "n1", State: api.StateUp, Since: exp, Jobs: []api.Job{job}, Hung: []api.Hung{}}
	reports := []*report.Report{{Version: 1, Node: "n1", Job: "42", Stage: diagnose.StageOnDemand, Summary: "nothing hung"}}
	svc := &fakeService{Job: job, Status_: st, Reports: reports}
	ts := startServer(t, svc, ServerOptions{}, "")
	ctx := context.Background()
	c := ts.client

	startReq := request.JobStartRequest{Job: "42", Expiration: time.Now().Add(time.Hour).Format(time.RFC3339), Grace: "90s", Cgroup: "/sys/fs/cgroup/slurm/job_42"}
	gotJob, err := c.StartJob(ctx, startReq)
	if err != nil || !reflect.DeepEqual(gotJob, job) {
		t.Errorf("StartJob = %+v, %v; want %+v", gotJob, err, job)
	}
	if _, err := c.EndJob(ctx, "42"); err != nil {
		t.Errorf("EndJob: %v", err)
	}
	if got, err := c.Status(ctx); err != nil || !reflect.DeepEqual(got, st) {
		t.Errorf("Status = %+v, %v; want %+v", got, err, st)
	}
	if got, err := c.Diagnose(ctx, ""); err != nil || !reflect.DeepEqual(got, reports) {
		t.Errorf("Diagnose = %+v, %v", got, err)
	}
	if _, err := c.Diagnose(ctx, "ƒ42 x"); err == nil {
		t.Errorf("Diagnose of an invalid id succeeded")
	}
	if _, err := c.Diagnose(ctx, "ƒ42"); err != nil {
		t.Errorf("Diagnose(ƒ42): %v", err)
	}
	if got, err := c.Resume(ctx, request.ResumeRequest{Reason: "fixed"}); err != nil || got.Node != "n1" {
		t.Errorf("Resume = %+v, %v", got, err)
	}
	if status, err := c.Epilog(ctx, "42", request.EpilogRequest{Argv: []string{"true"}}, io.Discard, io.Discard); err != nil || status != 0 {
		t.Errorf("Epilog = %d, %v", status, err)
	}

	want := []call{
		{Method: "StartJob", Arg: startReq},
		{Method: "EndJob", Arg: "42"},
		{Method: "Status"},
		{Method: "Diagnose", Arg: ""},
		{Method: "Diagnose", Arg: "ƒ42"},
		{Method: "Resume", Arg: request.ResumeRequest{Reason: "fixed"}},
		{Method: "RunEpilog", Arg: request.EpilogRequest{Argv: []string{"true"}}},
	}
	calls := svc.Calls()
	if len(calls) != len(want) {
		t.Fatalf("calls = %+v; want %+v", calls, want)
	}
	for i, c := range calls {
		if c.Method != want[i].Method || !reflect.DeepEqual(c.Arg, want[i].Arg) {
			t.Errorf("call %d = %s(%+v); want %s(%+v)", i, c.Method, c.Arg, want[i].Method, want[i].Arg)
		}
		// The client runs in this process, as root.
		if !c.HasPeer || c.Peer.UID != uint32(os.Getuid()) || c.Peer.PID != int32(os.Getpid()) {
			t.Errorf("call %d: peer = %+v (%v); want uid %d pid %d", i, c.Peer, c.HasPeer, os.Getuid(), os.Getpid())
		}
	}
}

// TestStatusCodes checks the status and JSON body of raw requests: the
// success codes, the mapping of each Service error, and every way a request
// can be malformed (in which case the Service must not be called).
func TestStatusCodes(t *testing.T) {
	okStart := `{"job":"42","expiration":"0"}`
	tests := []struct {
		name       string
		svcErr     error
		method     string
		path       string
		body       string
		wantStatus int
		wantField  string
		wantMsg    string // substring of the error message
		wantCall   bool
	}{
		{name: "start created", method: "POST", path: "/v1/jobs", body: okStart, wantStatus: 201, wantCall: true},
		{name: "end ok", method: "POST", path: "/v1/jobs/42/end", wantStatus: 200, wantCall: true},
		{name: "status ok", method: "GET", path: "/v1/status", wantStatus: 200, wantCall: true},
		{name: "diagnose ok", method: "GET", path: "/v1/diagnose?job=42", wantStatus: 200, wantCall: true},
		{name: "resume ok", method: "POST", path: "/v1/resume", body: `{"reason":"ok"}`, wantStatus: 200, wantCall: true},
		{name: "update ok", method: "POST", path: "/v1/jobs/42/update", body: `{"expiration":"0"}`, wantStatus: 200, wantCall: true},
		{name: "update nothing", method: "POST", path: "/v1/jobs/42/update", body: `{}`,
			wantStatus: 400, wantField: "expiration", wantMsg: "nothing to update"},
		{name: "update bad cgroup", method: "POST", path: "/v1/jobs/42/update", body: `{"cgroup":"a\nb"}`,
			wantStatus: 400, wantField: "cgroup", wantMsg: "newline"},
		{name: "update unknown field", method: "POST", path: "/v1/jobs/42/update", body: `{"job":"42","expiration":"0"}`,
			wantStatus: 400, wantField: "job", wantMsg: `unknown field "job"`},
		{name: "update released", svcErr: fmt.Errorf("job 42: %w: it is released", request.ErrConflict),
			method: "POST", path: "/v1/jobs/42/update", body: `{"expiration":"0"}`, wantStatus: 409, wantMsg: "it is released", wantCall: true},
		{name: "too many jobs", svcErr: fmt.Errorf("job 42: %w: 4096 jobs", request.ErrFull),
			method: "POST", path: "/v1/jobs", body: okStart, wantStatus: 503, wantMsg: "too many jobs registered", wantCall: true},

		{name: "service input error", svcErr: &request.InputError{Field: "cgroup", Msg: "no such cgroup"},
			method: "POST", path: "/v1/jobs", body: okStart, wantStatus: 400, wantField: "cgroup", wantMsg: "cgroup: no such cgroup", wantCall: true},
		{name: "unknown job", svcErr: fmt.Errorf("job 42: %w", request.ErrUnknownJob),
			method: "POST", path: "/v1/jobs/42/end", wantStatus: 404, wantMsg: "job 42: unknown job", wantCall: true},
		{name: "duplicate job", svcErr: fmt.Errorf("job 42: %w", request.ErrDuplicateJob),
			method: "POST", path: "/v1/jobs", body: okStart, wantStatus: 409, wantMsg: "job 42: job already registered", wantCall: true},
		{name: "conflict", svcErr: fmt.Errorf("job 42 is released: %w", request.ErrConflict),
			method: "POST", path: "/v1/jobs/42/end", wantStatus: 409, wantMsg: "job 42 is released: conflict", wantCall: true},
		{name: "forbidden", svcErr: fmt.Errorf("resume needs root: %w", request.ErrForbidden),
			method: "POST", path: "/v1/resume", body: `{"reason":"x"}`, wantStatus: 403, wantMsg: "resume needs root", wantCall: true},
		{name: "internal", svcErr: errors.New("state dir: disk full"),
			method: "GET", path: "/v1/status", wantStatus: 500, wantMsg: "state dir: disk full", wantCall: true},
		{name: "epilog unknown job before start", svcErr: request.ErrUnknownJob,
			method: "POST", path: "/v1/jobs/42/epilog", body: `{"argv":["true"]}`, wantStatus: 404, wantMsg: "unknown job", wantCall: true},

		{name: "wrong method", method: "DELETE", path: "/v1/status", wantStatus: 405, wantMsg: "method DELETE not allowed on /v1/status (allowed: GET, HEAD)"},
		{name: "get on post route", method: "GET", path: "/v1/jobs/42/end", wantStatus: 405, wantMsg: "allowed: POST"},
		{name: "unknown path", method: "GET", path: "/v2/status", wantStatus: 404, wantMsg: "no such endpoint: /v2/status"},
		{name: "body too large", method: "POST", path: "/v1/jobs", body: `{"job":"` + strings.Repeat("x", 70<<10) + `"}`,
			wantStatus: 413, wantMsg: "request body exceeds 65536 bytes"},
		{name: "too large after a small object", method: "POST", path: "/v1/jobs", body: okStart + strings.Repeat(" ", 70<<10),
			wantStatus: 413, wantMsg: "request body exceeds 65536 bytes"},
		{name: "unknown field", method: "POST", path: "/v1/jobs", body: `{"job":"42","expiration":"0","walltime":60}`,
			wantStatus: 400, wantField: "walltime", wantMsg: `unknown field "walltime"`},
		{name: "trailing garbage", method: "POST", path: "/v1/jobs", body: okStart + ` xyz`,
			wantStatus: 400, wantField: "body", wantMsg: "trailing data after the JSON object"},
		{name: "second object", method: "POST", path: "/v1/resume", body: `{"reason":"a"}{"reason":"b"}`,
			wantStatus: 400, wantField: "body", wantMsg: "trailing data"},
		{name: "wrong type", method: "POST", path: "/v1/jobs", body: `{"job":42}`,
			wantStatus: 400, wantField: "job", wantMsg: "want a string, got number"},
		{name: "bad json", method: "POST", path: "/v1/jobs", body: `{"job":"42",}`,
			wantStatus: 400, wantField: "body", wantMsg: "invalid JSON at offset 13: invalid character '}'"},
		{name: "syntax error", method: "POST", path: "/v1/jobs", body: `{"job" "42"}`,
			wantStatus: 400, wantField: "body", wantMsg: "invalid JSON at offset 8"},
		{name: "truncated json", method: "POST", path: "/v1/jobs", body: `{"job":"42"`,
			wantStatus: 400, wantField: "body", wantMsg: "truncated JSON at offset 11"},
		{name: "not an object", method: "POST", path: "/v1/jobs", body: `[1,2]`,
			wantStatus: 400, wantField: "body", wantMsg: "want a JSON object, got array"},
		{name: "empty body", method: "POST", path: "/v1/resume",
			wantStatus: 400, wantField: "body", wantMsg: "empty request body"},
		{name: "missing job", method: "POST", path: "/v1/jobs", body: `{"expiration":"0"}`,
			wantStatus: 400, wantField: "job", wantMsg: "job id is empty"},
		{name: "bad expiration", method: "POST", path: "/v1/jobs", body: `{"job":"42","expiration":"soon"}`,
			wantStatus: 400, wantField: "expiration", wantMsg: `not a time: "soon"`},
		{name: "bad grace", method: "POST", path: "/v1/jobs", body: `{"job":"42","expiration":"0","grace":"-3s"}`,
			wantStatus: 400, wantField: "grace", wantMsg: "negative"},
		{name: "invalid id in path", method: "POST", path: "/v1/jobs/a%20b/end",
			wantStatus: 400, wantField: "job", wantMsg: "white space"},
		{name: "slash in id", method: "POST", path: "/v1/jobs/a%2Fb/epilog", body: `{"argv":["true"]}`,
			wantStatus: 400, wantField: "job", wantMsg: "contains '/'"},
		{name: "epilog without argv", method: "POST", path: "/v1/jobs/42/epilog", body: `{"argv":[]}`,
			wantStatus: 400, wantField: "argv", wantMsg: "command is required"},
		{name: "epilog unknown field", method: "POST", path: "/v1/jobs/42/epilog", body: `{"argv":["true"],"uid":0}`,
			wantStatus: 400, wantField: "uid", wantMsg: `unknown field "uid"`},
		{name: "resume without reason", method: "POST", path: "/v1/resume", body: `{}`,
			wantStatus: 400, wantField: "reason", wantMsg: "reason is required"},
		{name: "resume reason too long", method: "POST", path: "/v1/resume", body: `{"reason":"` + strings.Repeat("r", 257) + `"}`,
			wantStatus: 400, wantField: "reason", wantMsg: "257 bytes"},
		{name: "diagnose unknown parameter", method: "GET", path: "/v1/diagnose?jobid=42",
			wantStatus: 400, wantField: "jobid", wantMsg: "unknown query parameter"},
		{name: "diagnose invalid job", method: "GET", path: "/v1/diagnose?job=",
			wantStatus: 400, wantField: "job", wantMsg: "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := &fakeService{Err: tt.svcErr}
			ts := startServer(t, svc, ServerOptions{}, "")
			req, err := http.NewRequest(tt.method, "http://nodeagent"+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := rawClient(ts.socket).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			data, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d; want %d (body %s)", resp.StatusCode, tt.wantStatus, data)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("content type %q", ct)
			}
			if tt.wantStatus == 405 && resp.Header.Get("Allow") == "" {
				t.Errorf("405 without an Allow header")
			}
			if tt.wantStatus >= 400 {
				var body api.ErrorBody
				dec := json.NewDecoder(bytes.NewReader(data))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&body); err != nil {
					t.Fatalf("error body %q: %v", data, err)
				}
				if body.Field != tt.wantField || !strings.Contains(body.Error, tt.wantMsg) {
					t.Errorf("body = %+v; want field %q, message containing %q", body, tt.wantField, tt.wantMsg)
				}
			}
			if called := len(svc.Calls()) > 0; called != tt.wantCall {
				t.Errorf("service called: %v; want %v (%+v)", called, tt.wantCall, svc.Calls())
			}
		})
	}
}

func TestClientServerError(t *testing.T) {
	svc := &fakeService{Err: fmt.Errorf("job 7: %w", request.ErrUnknownJob)}
	ts := startServer(t, svc, ServerOptions{}, "")
	_, err := ts.client.EndJob(context.Background(), "7")
	var se *api.ServerError
	if !errors.As(err, &se) || se.Status != 404 || se.Error() != "job 7: unknown job" {
		t.Fatalf("EndJob error = %#v; want a ServerError 404 \"job 7: unknown job\"", err)
	}

	svc.Err = &request.InputError{Field: "expiration", Msg: "too old"}
	_, err = ts.client.StartJob(context.Background(), request.JobStartRequest{Job: "7", Expiration: "0"})
	if !errors.As(err, &se) || se.Status != 400 || se.Body.Field != "expiration" || se.Error() != "expiration: too old" {
		t.Fatalf("StartJob error = %#v", err)
	}
}

func TestClientConnectionError(t *testing.T) {
	c := api.NewClient(shortTempDir(t) + "/none.sock")
	_, err := c.Status(context.Background())
	if err == nil || !strings.Contains(err.Error(), "none.sock") || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("Status error = %v; want one naming the socket and the cause", err)
	}
}

func TestDefaultSocket(t *testing.T) {
	t.Setenv(api.SocketEnv, "")
	if got := api.DefaultSocket(); got != api.DefaultSocketPath {
		t.Errorf("DefaultSocket() = %q; want %q", got, api.DefaultSocketPath)
	}
	t.Setenv(api.SocketEnv, "/tmp/x.sock")
	if got := api.DefaultSocket(); got != "/tmp/x.sock" {
		t.Errorf("DefaultSocket() = %q with %s set", got, api.SocketEnv)
	}
}
