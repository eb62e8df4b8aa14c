package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/gracewatch/gracewatch/agent/report"
	"github.com/gracewatch/gracewatch/agent/request"
)

// Socket path defaults.
const (
	// DefaultSocketPath is where the agent listens unless configured
	// otherwise.
	DefaultSocketPath = "/run/gracewatch/agent.sock"
	// SocketEnv names the environment variable that overrides the socket
	// path of clients.
	SocketEnv = "GRACEWATCH_SOCKET"
)

// DefaultSocket returns $GRACEWATCH_SOCKET, else DefaultSocketPath.
func DefaultSocket() string {
	if s := os.Getenv(SocketEnv); s != "" {
		return s
	}
	return DefaultSocketPath
}

// maxFrameLine bounds one line of an epilog stream (the server sends at
// most 32 KiB of data per frame, about 44 KiB of base64).
const maxFrameLine = 1 << 20

// ErrStreamBroken means the connection to the agent ended in the middle of
// an epilog stream, before its exit frame. The agent keeps supervising the
// epilogue.
var ErrStreamBroken = errors.New("connection to the agent broke during the epilog")

// ServerError is an error response of the agent. Status is the HTTP status
// (200 for an "error" frame of an epilog stream that had already started).
type ServerError struct {
	Status int
	Body   ErrorBody
}

// Error returns the agent's message.
func (e *ServerError) Error() string {
	if e.Body.Error != "" {
		return e.Body.Error
	}
	return fmt.Sprintf("agent answered HTTP status %d", e.Status)
}

// Client talks to the agent over its Unix socket, one connection per call
// (transport.go). It is safe for concurrent use. Every call blocks until the
// answer arrives or ctx ends; there is no other timeout.
type Client struct {
	socket      string
	connectWait time.Duration
}

// NewClient returns a client of the agent listening at socket. It connects
// on each call.
func NewClient(socket string) *Client {
	return &Client{socket: socket}
}

// SetConnectWait makes every call wait up to d for the agent to accept
// the connection: a socket that does not exist or refuses connections (the
// agent is restarting, or not started yet) is tried again with back-off
// instead of failing at once. Only connecting is retried, so a request that
// reached the agent is never sent twice. 0 (the default) fails at once. Set
// it before the first call.
func (c *Client) SetConnectWait(d time.Duration) { c.connectWait = d }

// dial connects to the socket, retrying for c.connectWait while the agent
// is not there.
func (c *Client) dial(ctx context.Context) (net.Conn, error) {
	start := time.Now()
	pause := 50 * time.Millisecond
	for {
		conn, err := dialUnix(ctx, c.socket)
		if err == nil || !agentAbsent(err) {
			return conn, err
		}
		left := c.connectWait - time.Since(start)
		if left <= 0 {
			return nil, err
		}
		t := time.NewTimer(min(pause, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		pause = min(2*pause, time.Second)
	}
}

// agentAbsent reports whether a dial error means that no agent listens on
// the socket now (as during its restart), as opposed to a refusal that
// waiting does not cure (permissions, a path that is not a socket).
func agentAbsent(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EAGAIN)
}

// Socket returns the socket path the client connects to.
func (c *Client) Socket() string { return c.socket }

// Close releases nothing today (no connection outlives its call); it is
// kept so that callers need not know.
func (c *Client) Close() {}

// StartJob registers a job (POST /v1/jobs).
func (c *Client) StartJob(ctx context.Context, req request.JobStartRequest) (Job, error) {
	var job Job
	err := c.call(ctx, methodPost, "/v1/jobs", req, &job)
	return job, err
}

// EndJob records that a job's tasks ended (POST /v1/jobs/{id}/end).
func (c *Client) EndJob(ctx context.Context, id string) (Job, error) {
	var job Job
	err := c.call(ctx, methodPost, "/v1/jobs/"+url.PathEscape(id)+"/end", nil, &job)
	return job, err
}

// UpdateJob changes a registered job's expiration or adds its cgroup
// (POST /v1/jobs/{id}/update).
func (c *Client) UpdateJob(ctx context.Context, id string, req request.JobUpdateRequest) (Job, error) {
	var job Job
	err := c.call(ctx, methodPost, "/v1/jobs/"+url.PathEscape(id)+"/update", req, &job)
	return job, err
}

// Status returns the node's state (GET /v1/status).
func (c *Client) Status(ctx context.Context) (Status, error) {
	var st Status
	err := c.call(ctx, methodGet, "/v1/status", nil, &st)
	return st, err
}

// Diagnose returns the reports of every job (job == "") or of one job
// (GET /v1/diagnose).
func (c *Client) Diagnose(ctx context.Context, job string) ([]*report.Report, error) {
	path := "/v1/diagnose"
	if job != "" {
		path += "?" + url.Values{"job": {job}}.Encode()
	}
	var reports []*report.Report
	err := c.call(ctx, methodGet, path, nil, &reports)
	return reports, err
}

// Resume clears the node's DOWN latch (POST /v1/resume).
func (c *Client) Resume(ctx context.Context, req request.ResumeRequest) (Status, error) {
	var st Status
	err := c.call(ctx, methodPost, "/v1/resume", req, &st)
	return st, err
}

// Epilog runs an epilogue under the agent's supervision (POST
// /v1/jobs/{id}/epilog) and copies its output to stdout and stderr as it
// arrives. It returns the epilogue's exit status. A writer that fails is
// not written to again, but the stream is still read to its end for the
// status.
//
// If ctx ends first, Epilog returns ctx's error; an error matching
// ErrStreamBroken means the connection ended mid-stream. In both cases the
// agent keeps supervising the epilogue.
func (c *Client) Epilog(ctx context.Context, id string, req request.EpilogRequest, stdout, stderr io.Writer) (status int, err error) {
	resp, err := c.do(ctx, methodPost, "/v1/jobs/"+url.PathEscape(id)+"/epilog", req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != statusOK {
		return 0, readServerError(resp)
	}
	if mt := resp.ContentType; mt != "application/x-ndjson" {
		return 0, fmt.Errorf("agent at %s: epilog answered with content type %q, not application/x-ndjson", c.socket, mt)
	}
	status, err = readFrames(resp.Body, stdout, stderr)
	if err != nil && ctx.Err() != nil {
		return 0, ctx.Err()
	}
	return status, err
}

// readFrames decodes an epilog stream: newline-delimited JSON frames, data
// frames first, then one "exit" or "error" frame. Frames of unknown streams
// are skipped, for newer servers.
func readFrames(r io.Reader, stdout, stderr io.Writer) (int, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	out := []io.Writer{stdout, stderr}
	for n := 1; ; n++ {
		line = line[:0]
		for {
			chunk, err := br.ReadSlice('\n')
			line = append(line, chunk...)
			if len(line) > maxFrameLine {
				return 0, fmt.Errorf("frame %d is longer than %d bytes", n, maxFrameLine)
			}
			if err == nil {
				break
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if errors.Is(err, io.EOF) {
				if len(line) > 0 {
					return 0, fmt.Errorf("%w: stream ended inside frame %d", ErrStreamBroken, n)
				}
				return 0, fmt.Errorf("%w: stream ended before the exit status", ErrStreamBroken)
			}
			return 0, fmt.Errorf("%w: %v", ErrStreamBroken, err)
		}
		trimmed := bytes.TrimSpace(line)
		if len(trimmed) == 0 {
			continue
		}
		if status, ok := exitFrame(trimmed); ok {
			return status, nil // the plain exit frame, without reflection (epilogjson.go)
		}
		var f Frame
		if err := json.Unmarshal(trimmed, &f); err != nil {
			return 0, fmt.Errorf("frame %d from the agent: %w", n, request.DescribeJSONError("frame", err))
		}
		switch f.Stream {
		case "stdout", "stderr":
			i := 0
			if f.Stream == "stderr" {
				i = 1
			}
			if out[i] != nil && len(f.Data) > 0 {
				if _, err := out[i].Write(f.Data); err != nil {
					out[i] = nil
				}
			}
		case "exit":
			if f.Status == nil {
				return 0, fmt.Errorf("frame %d from the agent: exit frame without a status", n)
			}
			if *f.Status < 0 || *f.Status > 255 {
				return 0, fmt.Errorf("frame %d from the agent: exit status %d out of range 0-255", n, *f.Status)
			}
			return *f.Status, nil
		case "error":
			msg := f.Error
			if msg == "" {
				msg = "epilog failed (no message)"
			}
			return 0, &ServerError{Status: statusOK, Body: ErrorBody{Error: msg}}
		}
	}
}

// call sends body (if not nil) as JSON and decodes a 2xx answer into out.
func (c *Client) call(ctx context.Context, method, path string, body, out any) error {
	resp, err := c.do(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return readServerError(resp)
	}
	dec := json.NewDecoder(io.LimitReader(resp.Body, 64<<20))
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("agent at %s: decode answer of %s %s: %w", c.socket, method, path, err)
	}
	return nil
}

func (c *Client) do(ctx context.Context, method, path string, body any) (*response, error) {
	var b []byte
	switch v := body.(type) {
	case nil:
	case request.EpilogRequest:
		b = appendEpilogRequest(nil, v) // see epilogjson.go
	default:
		var err error
		if b, err = json.Marshal(body); err != nil {
			return nil, err
		}
	}
	resp, err := c.roundTrip(ctx, method, path, b)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("agent at %s: %w", c.socket, err)
	}
	return resp, nil
}

// readServerError reads an error response into a *ServerError.
func readServerError(resp *response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes))
	se := &ServerError{Status: resp.StatusCode}
	if err := json.Unmarshal(data, &se.Body); err != nil || se.Body.Error == "" {
		se.Body = ErrorBody{Error: strings.TrimSpace(string(data))}
		if se.Body.Error == "" {
			se.Body.Error = fmt.Sprintf("agent answered HTTP status %d", resp.StatusCode)
		}
	}
	return se
}
