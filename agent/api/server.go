package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/gracewatch/gracewatch/agent/report"
	"github.com/gracewatch/gracewatch/agent/request"
	"github.com/gracewatch/gracewatch/internal/clock"
)

// Timeouts of the server. There is deliberately no write timeout and no
// whole-request read timeout: an epilog stream lasts as long as the
// epilogue, and net/http cancels a request's context when a read deadline
// passes.
const (
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 2 * time.Minute
	// maxChunk bounds the data of one frame, so a frame line stays well
	// below the client's line limit.
	maxChunk = 32 << 10
)

// ServerOptions configures a Server. The zero value allows only root.
type ServerOptions struct {
	// AllowedUIDs and AllowedGIDs are the peers (by SO_PEERCRED) allowed to
	// use the API besides uid 0. A gid matches the peer's primary group or
	// one of its supplementary groups.
	AllowedUIDs []int
	AllowedGIDs []int
	// ProcRoot is the procfs mount, read for a peer's supplementary groups
	// (/proc/PID/status "Groups:"). Empty means /proc.
	ProcRoot string
	// Logger receives the server's events; nil discards them.
	Logger *slog.Logger
	// Clock is used for the syntax checks of expirations; nil is the wall
	// clock.
	Clock clock.Clock
}

// Server serves the local API over a Service. It is safe for concurrent use;
// Serve may be called for several listeners.
type Server struct {
	svc   Service
	opts  ServerOptions
	log   *slog.Logger
	clock clock.Clock
	mux   *http.ServeMux
	hs    *http.Server

	// stopping ends when Shutdown starts; epilog streams end with it.
	stopping context.Context
	stop     context.CancelFunc
}

var _ http.Handler = (*Server)(nil)

// NewServer returns a server answering with svc. Nothing is served until
// Serve.
func NewServer(svc Service, opts ServerOptions) *Server {
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "api")
	clk := opts.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	s := &Server{svc: svc, opts: opts, log: log, clock: clk, mux: http.NewServeMux()}
	s.stopping, s.stop = context.WithCancel(context.Background())
	s.routes()
	s.hs = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    MaxBodyBytes,
		ConnContext:       s.connContext,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return s
}

// Serve accepts connections on l until Shutdown, then returns nil; any other
// failure of l is returned. It blocks.
func (s *Server) Serve(l net.Listener) error {
	err := s.hs.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Drain stops accepting connections and waits until every request in
// progress has ended, epilog streams included, or ctx ends (then it
// returns ctx's error and the requests go on). The agent drains before it
// stops, so that an epilogue that ends within the wait reports its exit
// status to its caller; clients that connect meanwhile find no agent and,
// with a connect wait, reach the next one. Call Shutdown after it.
func (s *Server) Drain(ctx context.Context) error {
	return s.hs.Shutdown(ctx)
}

// Shutdown stops accepting connections, ends the epilog streams in progress
// (with an "error" frame saying that the agent keeps supervising) and waits
// for the connections to finish until ctx ends; then it closes them. The
// Service is not told: epilogues go on under its supervision.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stop()
	err := s.hs.Shutdown(ctx)
	if errors.Is(err, net.ErrClosed) {
		err = nil // Drain closed the listeners already
	}
	if err != nil {
		_ = s.hs.Close()
	}
	return err
}

type route struct {
	method, path string
	h            http.HandlerFunc
}

func (s *Server) routes() {
	routes := []route{
		{"GET", "/v1/status", s.handleStatus},
		{"POST", "/v1/jobs", s.handleStartJob},
		{"POST", "/v1/jobs/{id}/end", s.handleEndJob},
		{"POST", "/v1/jobs/{id}/update", s.handleUpdateJob},
		{"POST", "/v1/jobs/{id}/epilog", s.handleEpilog},
		{"GET", "/v1/diagnose", s.handleDiagnose},
		{"POST", "/v1/resume", s.handleResume},
	}
	for _, rt := range routes {
		s.mux.HandleFunc(rt.method+" "+rt.path, rt.h)
		// The same path without a method catches the other methods, so
		// that a 405 has a JSON body like every other error.
		allow := rt.method
		if allow == "GET" {
			allow = "GET, HEAD"
		}
		s.mux.HandleFunc(rt.path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeJSONError(w, http.StatusMethodNotAllowed, ErrorBody{
				Error: fmt.Sprintf("method %s not allowed on %s (allowed: %s)", r.Method, rt.path, allow),
			})
		})
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSONError(w, http.StatusNotFound, ErrorBody{Error: fmt.Sprintf("no such endpoint: %s", r.URL.Path)})
	})
}

// ServeHTTP checks the peer, then routes the request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := s.authorize(r.Context()); err != nil {
		writeJSONError(w, http.StatusForbidden, ErrorBody{Error: err.Error()})
		return
	}
	s.mux.ServeHTTP(w, r)
}

// conn is what the server knows about one connection.
type conn struct {
	peer     request.Peer
	peerErr  error // SO_PEERCRED failed
	rejected sync.Once
}

type connKey struct{}

// connContext runs once per accepted connection: it reads the peer's
// credentials (SO_PEERCRED) and supplementary groups.
func (s *Server) connContext(ctx context.Context, c net.Conn) context.Context {
	cn := &conn{}
	cn.peer, cn.peerErr = peerCred(c)
	if cn.peerErr == nil {
		groups, err := readGroups(s.opts.ProcRoot, cn.peer.PID)
		if err != nil {
			s.log.Debug("cannot read peer's groups", "pid", cn.peer.PID, "uid", cn.peer.UID, "err", err)
		}
		cn.peer.Groups = groups
		ctx = request.WithPeer(ctx, cn.peer)
	}
	return context.WithValue(ctx, connKey{}, cn)
}

// peerCred returns the SO_PEERCRED identity of a Unix socket connection.
func peerCred(c net.Conn) (request.Peer, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return request.Peer{}, fmt.Errorf("connection from %s is not a Unix socket", c.RemoteAddr())
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return request.Peer{}, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return request.Peer{}, fmt.Errorf("peer credentials: %w", err)
	}
	if credErr != nil {
		return request.Peer{}, fmt.Errorf("peer credentials (SO_PEERCRED): %w", credErr)
	}
	return request.Peer{PID: cred.Pid, UID: cred.Uid, GID: cred.Gid}, nil
}

// readGroups reads the "Groups:" line of procRoot/PID/status. The process
// may have exited or (rarely) its pid been reused since it connected: the
// groups are a best effort on top of the uid and gid from the kernel.
// Direct, not gopsutil's Process.Groups: this package is linked by the
// agent's client, which must stay free of gopsutil.
func readGroups(procRoot string, pid int32) ([]uint32, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("no pid")
	}
	f, err := os.Open(filepath.Join(procRoot, strconv.Itoa(int(pid)), "status"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "Groups:")
		if !ok {
			continue
		}
		var groups []uint32
		for _, g := range strings.Fields(rest) {
			n, err := strconv.ParseUint(g, 10, 32)
			if err != nil {
				return groups, fmt.Errorf("%s: bad group %q", f.Name(), g)
			}
			groups = append(groups, uint32(n))
		}
		return groups, nil
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%s: no Groups line", f.Name())
}

// authorize checks the connection's peer against the allowed uids and gids.
func (s *Server) authorize(ctx context.Context) error {
	cn, ok := ctx.Value(connKey{}).(*conn)
	if !ok {
		return errors.New("peer credentials unknown: the API is served on Unix sockets only")
	}
	if cn.peerErr != nil {
		cn.rejected.Do(func() { s.log.Warn("rejected peer", "err", cn.peerErr) })
		return cn.peerErr
	}
	p := cn.peer
	if s.allowed(p) {
		return nil
	}
	cn.rejected.Do(func() {
		s.log.Warn("rejected peer", "uid", p.UID, "gid", p.GID, "pid", p.PID)
	})
	return fmt.Errorf("uid %d (pid %d) is not allowed to use the gracewatch agent; allow it with api.allowed_uids or api.allowed_gids", p.UID, p.PID)
}

func (s *Server) allowed(p request.Peer) bool {
	if p.UID == 0 || slices.Contains(s.opts.AllowedUIDs, int(p.UID)) {
		return true
	}
	if slices.Contains(s.opts.AllowedGIDs, int(p.GID)) {
		return true
	}
	for _, g := range p.Groups {
		if slices.Contains(s.opts.AllowedGIDs, int(g)) {
			return true
		}
	}
	return false
}

// Handlers.

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	st, err := s.svc.Status(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) handleStartJob(w http.ResponseWriter, r *http.Request) {
	req, warn, err := decodeJobStart(http.MaxBytesReader(w, r.Body, MaxBodyBytes), s.clock.Now())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.warnUser(req.Job, warn)
	job, err := s.svc.StartJob(r.Context(), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, withWarning(job, req.Job, warn))
}

func (s *Server) handleEndJob(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := request.ValidateJobID(id); err != nil {
		s.writeError(w, r, err)
		return
	}
	job, err := s.svc.EndJob(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, job)
}

func (s *Server) handleUpdateJob(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := request.ValidateJobID(id); err != nil {
		s.writeError(w, r, err)
		return
	}
	req, warn, err := decodeJobUpdate(http.MaxBytesReader(w, r.Body, MaxBodyBytes), s.clock.Now())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.warnUser(id, warn)
	job, err := s.svc.UpdateJob(r.Context(), id, req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, withWarning(job, id, warn))
}

func (s *Server) handleDiagnose(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		if k != "job" {
			s.writeError(w, r, request.Invalid(fieldName(k), "unknown query parameter %s", request.Quote(k)))
			return
		}
	}
	job := q.Get("job")
	if _, ok := q["job"]; ok {
		if err := request.ValidateJobID(job); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	reports, err := s.svc.Diagnose(r.Context(), job)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if reports == nil {
		reports = []*report.Report{}
	}
	writeJSON(w, http.StatusOK, reports)
}

func (s *Server) handleResume(w http.ResponseWriter, r *http.Request) {
	var req request.ResumeRequest
	if err := decodeBody(http.MaxBytesReader(w, r.Body, MaxBodyBytes), &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := request.ValidateReason(req.Reason); err != nil {
		s.writeError(w, r, err)
		return
	}
	st, err := s.svc.Resume(r.Context(), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) handleEpilog(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := request.ValidateJobID(id); err != nil {
		s.writeError(w, r, err)
		return
	}
	var req request.EpilogRequest
	if err := decodeBody(http.MaxBytesReader(w, r.Body, MaxBodyBytes), &req); err != nil {
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
		fw.frame(Frame{Stream: "error", Error: fmt.Sprintf("the agent is shutting down; it keeps supervising the epilog of job %s", id)}, true)
	case err != nil && !fw.started():
		// Nothing was streamed yet: a normal error response.
		s.writeError(w, r, err)
	case err != nil:
		s.log.Warn("epilog failed after it started", "job", id, "err", err)
		fw.frame(Frame{Stream: "error", Error: err.Error()}, true)
	default:
		fw.frame(Frame{Stream: "exit", Status: &status}, true)
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
		if err := f.frame(Frame{Stream: stream, Data: p[:n]}, false); err != nil {
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
func (f *frameWriter) frame(fr Frame, final bool) error {
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

// decodeBody decodes exactly one JSON object from r into v, refusing
// unknown fields and trailing data. Its errors are *request.InputError (400) or
// *http.MaxBytesError (413).
func decodeBody(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bodyError(err, dec.InputOffset())
	}
	// Only white space may follow.
	if _, err := dec.Token(); err != io.EOF {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return request.Invalid("body", "trailing data after the JSON object at offset %d", dec.InputOffset())
	}
	return nil
}

// bodyError explains a decoding error of a request body.
func bodyError(err error, offset int64) error {
	var mbe *http.MaxBytesError
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &mbe):
		return err
	case errors.Is(err, io.EOF):
		return request.Invalid("body", "empty request body: want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return request.Invalid("body", "truncated JSON at offset %d", offset)
	case errors.As(err, &syn):
		return request.Invalid("body", "invalid JSON at offset %d: %s", syn.Offset, strings.TrimPrefix(syn.Error(), "json: "))
	case errors.As(err, &typ):
		if typ.Field == "" {
			return request.Invalid("body", "want a JSON object, got %s", typ.Value)
		}
		return request.Invalid(typ.Field, "want %s, got %s at offset %d", request.JSONKind(typ.Type.String()), typ.Value, typ.Offset)
	}
	// DisallowUnknownFields has no typed error: `json: unknown field "x"`.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if uq, err := strconv.Unquote(name); err == nil {
			name = uq
		}
		return request.Invalid(fieldName(name), "unknown field %s", request.Quote(name))
	}
	return request.Invalid("body", "%s", strings.TrimPrefix(err.Error(), "json: "))
}

// fieldName returns name for ErrorBody.Field when it is usable there, else
// "body": a client-chosen name may be empty, huge or not UTF-8.
func fieldName(name string) string {
	if name == "" || len(name) > 64 || !utf8.ValidString(name) {
		return "body"
	}
	return name
}

// decodeJobStart decodes and checks a POST /v1/jobs body. The checks need no
// configuration (the Service checks the expiration's age against its
// max_expiration_age).
//
// A user name that request.ValidateUser refuses does not fail the
// registration (request.CheckUser): it is dropped from req and returned as
// warn, for the log and the answer.
func decodeJobStart(r io.Reader, now time.Time) (req request.JobStartRequest, warn, err error) {
	if err := decodeBody(r, &req); err != nil {
		return req, nil, err
	}
	if err := request.ValidateJobID(req.Job); err != nil {
		return req, nil, err
	}
	if _, _, err := request.ParseExpiration(req.Expiration, now, 0); err != nil {
		return req, nil, err
	}
	if req.Grace != "" {
		if _, err := request.ParseGrace(req.Grace); err != nil {
			return req, nil, err
		}
	}
	if err := request.ValidateCgroup(req.Cgroup); err != nil {
		return req, nil, err
	}
	req.User, warn = request.CheckUser(req.User)
	return req, warn, nil
}

// warnUser logs a user name dropped from job's registration.
func (s *Server) warnUser(job string, warn error) {
	if warn != nil {
		s.log.Warn("job user name refused, the job is supervised without one", "job", job, "err", warn)
	}
}

// withWarning is job with the warning of a dropped user name, if any.
func withWarning(job Job, id string, warn error) Job {
	if warn != nil {
		job.Warnings = append(job.Warnings, request.UserWarning(id, warn))
	}
	return job
}

// decodeJobUpdate reads and checks the body of POST /v1/jobs/{id}/update:
// at least one field, each well formed. Whether the new expiration lies
// before now is the Service's check, against its own clock.
//
// A user name that request.ValidateUser refuses is dropped with a warning
// (as in decodeJobStart) when the update changes something else, and
// refused when it is all the update holds.
func decodeJobUpdate(r io.Reader, now time.Time) (req request.JobUpdateRequest, warn, err error) {
	if err := decodeBody(r, &req); err != nil {
		return req, nil, err
	}
	if req.Expiration == "" && req.Cgroup == "" && req.User == "" {
		return req, nil, request.Invalid("expiration", "nothing to update: give an expiration, a cgroup or a user")
	}
	if req.Expiration != "" {
		if _, _, err := request.ParseExpiration(req.Expiration, now, 0); err != nil {
			return req, nil, err
		}
	}
	if err := request.ValidateCgroup(req.Cgroup); err != nil {
		return req, nil, err
	}
	if req.User, warn = request.CheckUser(req.User); warn != nil && req.Expiration == "" && req.Cgroup == "" {
		return req, nil, warn
	}
	return req, warn, nil
}

// Responses.

// errorResponse maps an error of decoding or of the Service to an HTTP
// status and body.
func errorResponse(err error) (int, ErrorBody) {
	var ie *request.InputError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &ie):
		return http.StatusBadRequest, ErrorBody{Error: ie.Error(), Field: ie.Field}
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, ErrorBody{Error: fmt.Sprintf("request body exceeds %d bytes", mbe.Limit)}
	case errors.Is(err, request.ErrUnknownJob):
		return http.StatusNotFound, ErrorBody{Error: err.Error()}
	case errors.Is(err, request.ErrDuplicateJob), errors.Is(err, request.ErrConflict):
		return http.StatusConflict, ErrorBody{Error: err.Error()}
	case errors.Is(err, request.ErrForbidden):
		return http.StatusForbidden, ErrorBody{Error: err.Error()}
	case errors.Is(err, request.ErrFull):
		return http.StatusServiceUnavailable, ErrorBody{Error: err.Error()}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, ErrorBody{Error: err.Error()}
	}
	return http.StatusInternalServerError, ErrorBody{Error: err.Error()}
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, body := errorResponse(err)
	if status >= 500 {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	} else {
		s.log.Debug("request refused", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	writeJSONError(w, status, body)
}

func writeJSONError(w http.ResponseWriter, status int, body ErrorBody) {
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		_ = json.NewEncoder(&buf).Encode(ErrorBody{Error: "encode response: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}
