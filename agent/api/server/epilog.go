package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/agent/request"
)

// handleEpilog runs an epilogue (POST /v1/jobs/{id}/epilog) and streams its
// output and exit status as newline-delimited JSON frames.
func (s *Server) handleEpilog(w http.ResponseWriter, r *http.Request) {
	id, ok := s.pathJobID(w, r)
	if !ok {
		return
	}
	var req request.EpilogRequest
	if err := decodeBody(http.MaxBytesReader(w, r.Body, api.MaxBodyBytes), &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := request.ValidateEpilog(req); err != nil {
		s.writeError(w, r, err)
		return
	}
	// A bad user name never fails an epilogue: it is dropped and logged
	// (the wrapper, nodeagent epilog, checked and said it already).
	var warn error
	req.User, warn = request.CheckUser(req.User)
	s.warnUser(id, warn)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stopWatch := context.AfterFunc(s.stopping, cancel)
	defer stopWatch()

	fw := &frameWriter{w: w, rc: http.NewResponseController(w), ctx: ctx}
	defer fw.close()
	status, err := s.svc.RunEpilog(ctx, id, req, fw)
	switch {
	case r.Context().Err() != nil:
		// The client went away (killed wrapper, --timeout): nothing to
		// write to; the Service keeps supervising.
		s.log.Info("epilog client went away; supervision continues", "job", id)
	case s.stopping.Err() != nil && err != nil:
		s.log.Info("epilog stream ended by shutdown; supervision continues", "job", id)
		fw.frame(api.Frame{Stream: "error", Error: fmt.Sprintf("the agent is shutting down; it keeps supervising the epilog of job %s", id)}, true)
	case err != nil && !fw.started():
		// Nothing was streamed yet: a normal error response.
		s.writeError(w, r, err)
	case err != nil:
		s.log.Warn("epilog failed after it started", "job", id, "err", err)
		fw.frame(api.Frame{Stream: "error", Error: err.Error()}, true)
	default:
		fw.frame(api.Frame{Stream: "exit", Status: &status}, true)
	}
}

// frameWriter is the request.OutputSink of one epilog request. It sends the
// response header with the first frame, so that a Service error before any
// output becomes an ordinary error response; writes after the client left,
// or after the handler returned, fail instead of touching the response.
type frameWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	ctx context.Context

	mu     sync.Mutex
	header bool
	closed bool
	err    error
}

var _ request.OutputSink = (*frameWriter)(nil)

var errStreamClosed = errors.New("epilog stream closed")

func (f *frameWriter) Stdout(p []byte) error { return f.data("stdout", p) }
func (f *frameWriter) Stderr(p []byte) error { return f.data("stderr", p) }

func (f *frameWriter) data(stream string, p []byte) error {
	for len(p) > 0 {
		n := min(len(p), maxChunk)
		if err := f.frame(api.Frame{Stream: stream, Data: p[:n]}, false); err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

func (f *frameWriter) started() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.header
}

// frame writes one line and flushes it. final frames are written even when
// the request's (derived) context has ended for a shutdown.
func (f *frameWriter) frame(fr api.Frame, final bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.closed:
		return errStreamClosed
	case f.err != nil:
		return f.err
	case !final && f.ctx.Err() != nil:
		return f.ctx.Err()
	}
	line, err := json.Marshal(fr)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	if !f.header {
		f.w.Header().Set("Content-Type", "application/x-ndjson")
		f.w.Header().Set("X-Content-Type-Options", "nosniff")
		f.w.WriteHeader(http.StatusOK)
		f.header = true
	}
	if _, err := f.w.Write(line); err != nil {
		f.err = err
		return err
	}
	if err := f.rc.Flush(); err != nil {
		f.err = err
		return err
	}
	return nil
}

func (f *frameWriter) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
}

// Decoding.
