// Package server is the server of the node agent's local API (package
// agent/api holds its wire types and client): net/http over a Unix socket,
// peers checked with SO_PEERCRED, every request handed to a Service (the
// supervisor).
package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
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

	"golang.org/x/sys/unix"

	"github.com/gracewatch/gracewatch/agent/api"
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
		MaxHeaderBytes:    api.MaxBodyBytes,
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
			writeJSONError(w, http.StatusMethodNotAllowed, api.ErrorBody{
				Error: fmt.Sprintf("method %s not allowed on %s (allowed: %s)", r.Method, rt.path, allow),
			})
		})
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSONError(w, http.StatusNotFound, api.ErrorBody{Error: fmt.Sprintf("no such endpoint: %s", r.URL.Path)})
	})
}

// ServeHTTP checks the peer, then routes the request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := s.authorize(r.Context()); err != nil {
		writeJSONError(w, http.StatusForbidden, api.ErrorBody{Error: err.Error()})
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
	s.reply(w, r, http.StatusOK, st, err)
}

func (s *Server) handleStartJob(w http.ResponseWriter, r *http.Request) {
	req, warn, err := decodeJobStart(http.MaxBytesReader(w, r.Body, api.MaxBodyBytes), s.clock.Now())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.warnUser(req.Job, warn)
	job, err := s.svc.StartJob(r.Context(), req)
	s.reply(w, r, http.StatusCreated, withWarning(job, req.Job, warn), err)
}

func (s *Server) handleEndJob(w http.ResponseWriter, r *http.Request) {
	id, ok := s.pathJobID(w, r)
	if !ok {
		return
	}
	job, err := s.svc.EndJob(r.Context(), id)
	s.reply(w, r, http.StatusOK, job, err)
}

func (s *Server) handleUpdateJob(w http.ResponseWriter, r *http.Request) {
	id, ok := s.pathJobID(w, r)
	if !ok {
		return
	}
	req, warn, err := decodeJobUpdate(http.MaxBytesReader(w, r.Body, api.MaxBodyBytes), s.clock.Now())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.warnUser(id, warn)
	job, err := s.svc.UpdateJob(r.Context(), id, req)
	s.reply(w, r, http.StatusOK, withWarning(job, id, warn), err)
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
	if err := decodeBody(http.MaxBytesReader(w, r.Body, api.MaxBodyBytes), &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := request.ValidateReason(req.Reason); err != nil {
		s.writeError(w, r, err)
		return
	}
	st, err := s.svc.Resume(r.Context(), req)
	s.reply(w, r, http.StatusOK, st, err)
}

// Service is what the server needs from the supervisor. Every method may be
// called concurrently; none holds the supervisor's state across a call.
type Service interface {
	// StartJob registers a job. It fails with request.ErrDuplicateJob or an
	// *request.InputError, and then changes nothing.
	StartJob(ctx context.Context, req request.JobStartRequest) (api.Job, error)
	// EndJob records T_end=now for a running job and starts its teardown
	// (or for an overdue job whose end was never reported).
	EndJob(ctx context.Context, id string) (api.Job, error)
	// UpdateJob changes the expiration or adds the cgroup of a job that is
	// running or tearing down. It fails with request.ErrUnknownJob, request.ErrConflict
	// (released, overdue, another cgroup) or an *request.InputError, and then
	// changes nothing.
	UpdateJob(ctx context.Context, id string, req request.JobUpdateRequest) (api.Job, error)
	// RunEpilog runs an epilogue for the job (registering it with E=now if
	// unknown, ending it if running), streams its output to out and blocks
	// until it exits, returning its status (128+signal if killed). If ctx ends
	// first it returns ctx.Err() and the epilogue goes on under supervision.
	RunEpilog(ctx context.Context, id string, req request.EpilogRequest, out request.OutputSink) (int, error)
	// Status returns the node's state.
	Status(ctx context.Context) (api.Status, error)
	// Diagnose returns the latest report of every job (job == "") or of one
	// job, taking a fresh snapshot of a job that is still tearing down.
	Diagnose(ctx context.Context, job string) ([]*report.Report, error)
	// Resume clears the DOWN latch.
	Resume(ctx context.Context, req request.ResumeRequest) (api.Status, error)
}
