package server

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/agent/request"
	"github.com/gracewatch/gracewatch/internal/testutil"
)

// TestEpilogStream streams stdout and stderr chunks through the real server
// and client, in order, then the exit status.
func TestEpilogStream(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 10<<10) // 160 KiB: several frames
	svc := &fakeService{Epilog: func(ctx context.Context, id string, req request.EpilogRequest, out request.OutputSink) (int, error) {
		for _, step := range []struct {
			stderr bool
			data   []byte
		}{{false, []byte("out 1\n")}, {true, []byte("err 1\n")}, {false, []byte("out 2\n")}, {false, big}, {true, []byte("err 2\n")}} {
			write := out.Stdout
			if step.stderr {
				write = out.Stderr
			}
			if err := write(step.data); err != nil {
				t.Errorf("sink: %v", err)
			}
		}
		return 3, nil
	}}
	ts := startServer(t, svc, ServerOptions{}, "")
	var stdout, stderr bytes.Buffer
	req := request.EpilogRequest{Argv: []string{"/etc/slurm/epilog", "-v"}, Env: []string{"SLURM_JOB_ID=42"}, Dir: "/"}
	status, err := ts.client.Epilog(context.Background(), "42", req, &stdout, &stderr)
	if err != nil || status != 3 {
		t.Fatalf("Epilog = %d, %v; want 3, nil", status, err)
	}
	wantOut := append([]byte("out 1\nout 2\n"), big...)
	if !bytes.Equal(stdout.Bytes(), wantOut) {
		t.Errorf("stdout: got %d bytes, want %d", stdout.Len(), len(wantOut))
	}
	if stderr.String() != "err 1\nerr 2\n" {
		t.Errorf("stderr = %q", stderr.String())
	}
	if calls := svc.Calls(); len(calls) != 1 || calls[0].Arg.(request.EpilogRequest).Argv[1] != "-v" {
		t.Errorf("calls = %+v", calls)
	}
}

// notifyWriter calls fn at its first write.
type notifyWriter struct {
	once sync.Once
	fn   func()
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.once.Do(w.fn)
	return len(p), nil
}

// TestEpilogClientGone: a client that leaves mid-stream ends the Service's
// context; later writes to the sink fail instead of panicking.
func TestEpilogClientGone(t *testing.T) {
	ended := make(chan error, 1)
	svc := &fakeService{Epilog: func(ctx context.Context, id string, req request.EpilogRequest, out request.OutputSink) (int, error) {
		if err := out.Stdout([]byte("working\n")); err != nil {
			t.Errorf("first write: %v", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			ended <- errors.New("context did not end after the client left")
			return 0, nil
		}
		// A supervisor may still have output buffered: writing must fail,
		// not panic.
		ended <- out.Stdout([]byte("late\n"))
		return 0, ctx.Err()
	}}
	ts := startServer(t, svc, ServerOptions{}, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := ts.client.Epilog(ctx, "42", request.EpilogRequest{Argv: []string{"sleep", "100"}}, &notifyWriter{fn: cancel}, nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Epilog error = %v; want context.Canceled", err)
	}
	select {
	case err := <-ended:
		if err == nil {
			t.Errorf("write after the client left succeeded")
		} else if strings.Contains(err.Error(), "did not end") {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("service did not return")
	}
}

// TestEpilogErrors: an error before any output is an ordinary error
// response; an error after output arrives as an "error" frame.
func TestEpilogErrors(t *testing.T) {
	t.Run("before output", func(t *testing.T) {
		svc := &fakeService{Epilog: func(ctx context.Context, id string, req request.EpilogRequest, out request.OutputSink) (int, error) {
			return 0, &request.InputError{Field: "argv", Msg: `"nosuch": executable file not found in $PATH`}
		}}
		ts := startServer(t, svc, ServerOptions{}, "")
		_, err := ts.client.Epilog(context.Background(), "42", request.EpilogRequest{Argv: []string{"nosuch"}}, nil, nil)
		var se *api.ServerError
		if !errors.As(err, &se) || se.Status != 400 || se.Body.Field != "argv" || !strings.Contains(se.Error(), "not found") {
			t.Fatalf("error = %#v; want a 400 ServerError for argv", err)
		}
	})
	t.Run("after output", func(t *testing.T) {
		svc := &fakeService{Epilog: func(ctx context.Context, id string, req request.EpilogRequest, out request.OutputSink) (int, error) {
			_ = out.Stderr([]byte("starting\n"))
			return 0, errors.New("wait: state lost")
		}}
		ts := startServer(t, svc, ServerOptions{}, "")
		var stderr bytes.Buffer
		_, err := ts.client.Epilog(context.Background(), "42", request.EpilogRequest{Argv: []string{"x"}}, nil, &stderr)
		var se *api.ServerError
		if !errors.As(err, &se) || se.Status != http.StatusOK || se.Error() != "wait: state lost" {
			t.Fatalf("error = %#v; want the error frame's message", err)
		}
		if stderr.String() != "starting\n" {
			t.Errorf("stderr = %q", stderr.String())
		}
	})
	t.Run("aborted connection", func(t *testing.T) {
		svc := &fakeService{Epilog: func(ctx context.Context, id string, req request.EpilogRequest, out request.OutputSink) (int, error) {
			_ = out.Stdout([]byte("partial\n"))
			panic(http.ErrAbortHandler) // net/http drops the connection
		}}
		ts := startServer(t, svc, ServerOptions{}, "")
		_, err := ts.client.Epilog(context.Background(), "42", request.EpilogRequest{Argv: []string{"x"}}, nil, nil)
		if !errors.Is(err, api.ErrStreamBroken) {
			t.Fatalf("error = %v; want ErrStreamBroken", err)
		}
	})
}

// TestEpilogShutdown: Shutdown ends running streams with an error frame
// saying that the agent keeps supervising, and returns promptly.
func TestEpilogShutdown(t *testing.T) {
	started := make(chan struct{})
	svc := &fakeService{Epilog: func(ctx context.Context, id string, req request.EpilogRequest, out request.OutputSink) (int, error) {
		_ = out.Stdout([]byte("running\n"))
		close(started)
		<-ctx.Done()
		return 0, ctx.Err()
	}}
	ts := startServer(t, svc, ServerOptions{}, "")
	errc := make(chan error, 1)
	go func() {
		_, err := ts.client.Epilog(context.Background(), "42", request.EpilogRequest{Argv: []string{"x"}}, nil, nil)
		errc <- err
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ts.srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	err := <-errc
	if err == nil || !strings.Contains(err.Error(), "keeps supervising the epilog of job 42") {
		t.Fatalf("Epilog error = %v; want the shutdown frame", err)
	}
}

// Drain lets an epilog stream in progress finish with its exit status,
// while new connections are refused; then Shutdown succeeds.
func TestEpilogDrain(t *testing.T) {
	started, finish := make(chan struct{}), make(chan struct{})
	svc := &fakeService{Epilog: func(ctx context.Context, id string, req request.EpilogRequest, out request.OutputSink) (int, error) {
		close(started)
		select {
		case <-finish:
			return 3, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}}
	ts := startServer(t, svc, ServerOptions{}, "")
	type result struct {
		status int
		err    error
	}
	res := make(chan result, 1)
	go func() {
		st, err := ts.client.Epilog(context.Background(), "42", request.EpilogRequest{Argv: []string{"x"}}, nil, nil)
		res <- result{st, err}
	}()
	<-started
	drained := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		drained <- ts.srv.Drain(ctx)
	}()
	// Draining: the listener is closed, the stream goes on.
	if !testutil.Poll(30*time.Second, func() bool {
		_, err := api.NewClient(ts.socket).Status(context.Background())
		return err != nil
	}) {
		t.Fatal("the draining server still accepts connections")
	}
	// Drain closed its listener (seen above) and now waits for the
	// stream: a Drain that did not wait would have returned by now, and a
	// stream cut by the drain ends with an error, not the epilogue's
	// status 3 checked below (the later event that proves it went on).
	select {
	case r := <-res:
		t.Fatalf("the stream ended while draining: %+v", r)
	case err := <-drained:
		t.Fatalf("Drain returned %v with a stream in progress", err)
	default:
	}
	close(finish)
	if r := <-res; r.err != nil || r.status != 3 {
		t.Fatalf("epilog after drain: status %d, err %v; want 3, nil", r.status, r.err)
	}
	if err := <-drained; err != nil {
		t.Fatalf("Drain: %v", err)
	}
}

// A client with a connect wait reaches an agent that starts late, and one
// without fails at once.
func TestClientConnectWait(t *testing.T) {
	dir := shortTempDir(t)
	socket := dir + "/agent.sock"
	start := time.Now()
	if _, err := api.NewClient(socket).Status(context.Background()); err == nil || time.Since(start) > time.Second {
		t.Fatalf("no agent, no wait: err %v after %v; want an error at once", err, time.Since(start))
	}
	c := api.NewClient(socket)
	c.SetConnectWait(300 * time.Millisecond)
	start = time.Now()
	if _, err := c.Status(context.Background()); err == nil || time.Since(start) < 200*time.Millisecond {
		t.Fatalf("no agent, wait 300ms: err %v after %v; want an error after about 300ms", err, time.Since(start))
	}

	c = api.NewClient(socket)
	c.SetConnectWait(20 * time.Second)
	defer c.Close()
	// start is read before the agent's start is scheduled, so that the
	// answer comes at least 0.4 s after it at any speed.
	start = time.Now()
	go func() {
		// The client cannot be watched retrying: the agent starts late,
		// and a machine so slow that the call starts later still only
		// skips the retry, never fails the test.
		// not a wait: the agent starting 0.4 s late is the scenario
		time.Sleep(400 * time.Millisecond)
		l, err := Listen(socket, "")
		if err != nil {
			t.Error(err)
			return
		}
		srv := NewServer(&fakeService{}, ServerOptions{Logger: testLogger(t)})
		go srv.Serve(l)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.Shutdown(ctx)
		})
	}()
	if _, err := c.Status(context.Background()); err != nil {
		t.Fatalf("agent started 0.4 s late, wait 20 s: %v", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("answered after %v, before the agent started", d)
	}
}
