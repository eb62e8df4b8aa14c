package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/hostlist"
	"github.com/gracewatch/gracewatch/internal/jsonbody"
	"github.com/gracewatch/gracewatch/internal/metrics"
	"github.com/gracewatch/gracewatch/internal/nodename"
	"github.com/gracewatch/gracewatch/internal/opt"
	"github.com/gracewatch/gracewatch/internal/ratelog"
	"github.com/gracewatch/gracewatch/internal/version"

	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/view"
)

// Limits of the HTTP API.
const (
	// MaxBodyBytes bounds a request body.
	MaxBodyBytes = 4 << 10
	// MaxReasonBytes bounds the reason of a resume or drain.
	MaxReasonBytes = 256

	// DefaultMaxWatchers bounds the /v1/watch streams at once. A
	// scheduler needs one or two, a status page one per open tab; each costs
	// a goroutine, a socket and a buffer of Options.SubscriberBuffer events
	// (3,000 watchers cost 90 MB and 3,000 descriptors when there was no
	// cap). Past it a watch is refused with 503 and Retry-After.
	DefaultMaxWatchers = 256
	// watchRetryAfter is the Retry-After of a watch refused for the cap, in
	// seconds: long enough that refused clients do not hammer, short
	// enough that a scheduler's watch comes back soon after a slot frees.
	watchRetryAfter = 10

	DefaultHeartbeat    = 15 * time.Second
	DefaultWriteTimeout = 30 * time.Second

	readHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout bounds the reading of a whole request, body
	// included (at most MaxBodyBytes): a client that announces a body and
	// sends none holds its connection that long (the watch clears it once
	// its request is read).
	DefaultReadTimeout = 15 * time.Second
	// DefaultMaxConns bounds the connections open at once; past it a new
	// one is closed at once (listener.go, where the per-source bound and
	// the reserve are too). Each costs a descriptor and a goroutine;
	// watchers are bounded apart (DefaultMaxWatchers).
	DefaultMaxConns = 1024
	idleTimeout     = 2 * time.Minute
	maxHeaderBytes  = 64 << 10
	// sseRetry is the reconnection delay suggested to watchers.
	sseRetry = 2 * time.Second
)

// ServerOptions configure a Server.
type ServerOptions struct {
	// Token is the admin bearer token (see LoadToken); empty disables the
	// admin endpoints (403). It opens the read endpoints too.
	Token []byte
	// ReadToken is the read bearer token: it opens the read endpoints
	// (auth.go lists them) and nothing else (403 on an admin endpoint).
	// Non-empty, the read endpoints need it or the admin token.
	ReadToken []byte
	// GuardReads makes the read endpoints need a token even without
	// ReadToken, then the admin token (the configuration's http.read_token).
	GuardReads bool
	// Logger receives the server's events; nil discards them.
	Logger *slog.Logger
	// Clock times the watch heartbeats; nil is the wall clock.
	Clock clock.Clock
	// Heartbeat is the interval of the watch streams' comments; 0 means
	// DefaultHeartbeat.
	Heartbeat time.Duration
	// WriteTimeout bounds each write to a client (a stalled watcher is
	// disconnected after it); 0 means DefaultWriteTimeout.
	WriteTimeout time.Duration
	// MaxWatchers bounds the /v1/watch streams served at once; 0 means
	// DefaultMaxWatchers.
	MaxWatchers int
	// ReadTimeout bounds the reading of a request; 0 means
	// DefaultReadTimeout.
	ReadTimeout time.Duration
	// MaxConns bounds the connections open at once; 0 means
	// DefaultMaxConns.
	MaxConns int
	// MaxConnsPerSource bounds the connections open at once from one IPv4
	// address or IPv6 /64 (listener.go); 0 means DefaultMaxConnsPerSource,
	// and more than MaxConns means MaxConns.
	MaxConnsPerSource int
	// Registry, if set, is served on GET /metrics (a read endpoint: with
	// ReadToken or GuardReads it needs a token) and receives the
	// server's own metrics (gracewatch_aggregator_http_requests_total).
	// Pass the Service's Options.Registry to serve its metrics too.
	Registry *prometheus.Registry
}

// Server serves the HTTP API (proto/openapi.yaml) over a Service. It is safe
// for concurrent use.
type Server struct {
	svc  Service
	opts ServerOptions
	// adminSum and readSum are the SHA-256 of the tokens, compared in
	// constant time with that of a request's.
	adminSum, readSum [sha256.Size]byte
	log               *slog.Logger
	clock             clock.Clock
	mux               *http.ServeMux
	hs                *http.Server
	// requests counts the answered requests by route pattern.
	requests *prometheus.CounterVec
	// watchers counts the /v1/watch streams being served.
	watchers atomic.Int64
	// authLog rate-limits the log of refused tokens (auth.go).
	authLog *ratelog.Limiter
	// conns admits and tracks the connections (listener.go, conns.go).
	conns *connTracker
	// table is the routes registered, for Routes (routes.go).
	table []Route

	// stopping ends when Shutdown starts; watch streams end with it.
	stopping context.Context
	stop     context.CancelFunc
}

var _ http.Handler = (*Server)(nil)

// NewServer returns a server over svc. Nothing is served until Serve.
func NewServer(svc Service, o ServerOptions) *Server {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	opt.Default(&o.Heartbeat, DefaultHeartbeat)
	opt.Default(&o.WriteTimeout, DefaultWriteTimeout)
	opt.Default(&o.MaxWatchers, DefaultMaxWatchers)
	opt.Default(&o.ReadTimeout, DefaultReadTimeout)
	opt.Default(&o.MaxConns, DefaultMaxConns)
	opt.Default(&o.MaxConnsPerSource, DefaultMaxConnsPerSource)
	o.MaxConnsPerSource = min(o.MaxConnsPerSource, o.MaxConns)
	log := o.Logger.With("component", "http")
	s := &Server{svc: svc, opts: o, log: log, clock: o.Clock, mux: http.NewServeMux(),
		authLog: ratelog.New(authLogEvery)}
	if len(o.Token) > 0 {
		s.adminSum = sha256.Sum256(o.Token)
	}
	if len(o.ReadToken) > 0 {
		s.readSum = sha256.Sum256(o.ReadToken)
	}
	s.stopping, s.stop = context.WithCancel(context.Background())
	var reg prometheus.Registerer
	if o.Registry != nil {
		reg = o.Registry
	}
	var err error
	if s.requests, err = newRequestsCounter(reg); err != nil {
		log.Error("cannot register the HTTP metrics", "err", err)
	}
	closed, err := newConnsClosedCounter(reg)
	if err != nil {
		log.Error("cannot register the HTTP metrics", "err", err)
	}
	s.conns = newConnTracker(o, log, closed)
	s.routes()
	s.hs = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: min(readHeaderTimeout, o.ReadTimeout),
		ReadTimeout:       o.ReadTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnState:         s.conns.connState,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	s.hs.RegisterOnShutdown(s.stop)
	return s
}

// Serve accepts connections on l until Shutdown, then returns nil, within
// ServerOptions.MaxConns and MaxConnsPerSource (listener.go). It blocks.
func (s *Server) Serve(l net.Listener) error {
	err := s.hs.Serve(s.limit(l))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// ServeTLS is Serve over TLS with the given certificate and key files.
func (s *Server) ServeTLS(l net.Listener, certFile, keyFile string) error {
	err := s.hs.ServeTLS(s.limit(l), certFile, keyFile)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting connections, ends the watch streams and waits for
// the other requests until ctx ends; then it closes the connections.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stop()
	err := s.hs.Shutdown(ctx)
	if err != nil {
		_ = s.hs.Close()
	}
	return err
}

func (s *Server) routes() {
	type route struct {
		method, path string
		access       access
		h            http.HandlerFunc
	}
	routes := []route{
		{"GET", "/v1/nodes", read, s.handleNodes},
		{"GET", "/v1/nodes/{name}", read, s.handleNode},
		{"POST", "/v1/nodes/{name}/resume", admin, s.handleAction(s.svc.Resume)},
		{"POST", "/v1/nodes/{name}/drain", admin, s.handleAction(s.svc.Drain)},
		{"POST", "/v1/nodes/{name}/forget", admin, s.handleForget},
		{"POST", "/v1/jobs", admin, s.handleJobs},
		{"GET", "/v1/watch", read, s.handleWatch},
		{"GET", "/v1/config", read, s.handleConfig},
		{"GET", "/v1/reservations", read, s.handleReservations},
		{"GET", "/v1/incidents", read, s.handleIncidents},
		{"GET", "/v1/grace", read, s.handleGrace},
		{"POST", "/v1/incidents/{id}/confirm", admin, s.handleConfirmIncident},
		{"GET", "/healthz", public, s.handleHealth},
		{"GET", "/readyz", public, s.handleReady},
		{"GET", "/{$}", public, s.handleUI}, // the page's HTML holds no data: it reads the API with the token typed into it
	}
	if s.opts.Registry != nil {
		routes = append(routes, route{"GET", "/metrics", read, metrics.Handler(s.opts.Registry, s.log).ServeHTTP})
	}
	for _, rt := range routes {
		s.table = append(s.table, Route{Method: rt.method, Path: rt.path, Access: rt.access.String()})
		h, acc := rt.h, rt.access
		long := rt.path == "/v1/watch"
		s.mux.HandleFunc(rt.method+" "+rt.path, func(w http.ResponseWriter, r *http.Request) {
			if !s.authorize(w, r, acc) {
				return
			}
			if long {
				// Its request is read; the stream lasts.
				_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
			}
			h(w, r)
		})
		allow := rt.method
		if allow == "GET" {
			allow = "GET, HEAD"
		}
		path := rt.path
		s.mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			s.writeError(w, http.StatusMethodNotAllowed, "method %s not allowed on %s (allowed: %s)", r.Method, path, allow)
		})
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, http.StatusNotFound, "no such endpoint: %s", r.URL.Path)
	})
}

// ServeHTTP routes the request and counts it by its route's pattern.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := &statusRecorder{ResponseWriter: w}
	s.mux.ServeHTTP(rec, r)
	s.conns.shortenDiscard(w, r)
	// The mux has set r.Pattern to the pattern that matched.
	s.requests.WithLabelValues(routeLabel(r), methodLabel(r.Method), rec.status()).Inc()
}

func (s *Server) handleNodes(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		if k != "state" && k != "format" {
			s.writeError(w, http.StatusBadRequest, "unknown query parameter %q (want state or format)", k)
			return
		}
	}
	var want view.State
	if v := q.Get("state"); q.Has("state") {
		st, err := api.ParseState(v)
		if err != nil {
			s.writeError(w, http.StatusBadRequest, "state: %v", err)
			return
		}
		want = view.State(st)
	}
	format := q.Get("format")
	if format != "" && format != "json" && format != "hostlist" {
		s.writeError(w, http.StatusBadRequest, "format: unknown format %q (want json or hostlist)", format)
		return
	}
	nodes := s.svc.NodesIn(want)
	if format == "hostlist" {
		names := make([]string, len(nodes))
		for i, n := range nodes {
			names[i] = n.Name
		}
		hl, err := hostlist.Compress(names)
		if err != nil {
			s.writeError(w, http.StatusInternalServerError, "%v", err)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		s.setWriteDeadline(w)
		_, _ = io.WriteString(w, hl+"\n")
		return
	}
	s.writeJSON(w, http.StatusOK, api.NodeList{Nodes: wireNodes(nodes)})
}

// pathNode returns the node name of the request's path; when it is not a
// node name it answers 400 and returns false.
func (s *Server) pathNode(w http.ResponseWriter, r *http.Request) (string, bool) {
	name := r.PathValue("name")
	if err := nodename.Validate(name); err != nil {
		s.writeError(w, http.StatusBadRequest, "path %s: %v", r.URL.EscapedPath(), err)
		return "", false
	}
	return name, true
}

func (s *Server) handleNode(w http.ResponseWriter, r *http.Request) {
	name, ok := s.pathNode(w, r)
	if !ok {
		return
	}
	node, ok := s.svc.Node(name)
	if !ok {
		s.writeError(w, http.StatusNotFound, "unknown node %q", name)
		return
	}
	n := WireNode(node)
	if n.LastReport != nil && n.LastReport.Detail != nil && s.tokenOf(r) == noToken {
		// The detail names command lines, open files and users' paths: it
		// is for clients with a token (read or admin) only, whether or not
		// the rest of the read endpoints need one.
		n.LastReport.Detail = nil // wireNode made n.LastReport: n's own
		n.LastReport.DetailOmitted = detailOmitted
		if len(s.opts.Token) == 0 && len(s.opts.ReadToken) == 0 {
			n.LastReport.DetailOmitted = detailNoToken
		}
	}
	s.writeJSON(w, http.StatusOK, n)
}

// The notes of a report served without its detail.
const (
	detailOmitted = "the report's detail (command lines, open files) is served only with the read or the admin token: send Authorization: Bearer <token>; or run nodeagent diagnose on the node"
	detailNoToken = "the report's detail (command lines, open files) is served only with the read or the admin token, and this aggregator has neither (http.read_token_file, http.admin_token_file); run nodeagent diagnose on the node"
)

func (s *Server) handleAction(act func(ctx context.Context, node, reason, by string) (view.Node, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, req, ok := s.nodeAction(w, r)
		if !ok {
			return
		}
		by := fmt.Sprintf("%s (HTTP from %s)", s.svc.Name(), r.RemoteAddr)
		n, err := act(r.Context(), name, req.Reason, by)
		if err != nil {
			s.writeActionError(w, r, name, err)
			return
		}
		s.writeJSON(w, http.StatusOK, WireNode(n))
	}
}

// writeActionError answers a node action (resume, drain, forget) that
// failed with err, with the status its error calls for; nothing when the
// client left.
func (s *Server) writeActionError(w http.ResponseWriter, r *http.Request, name string, err error) {
	switch FailureOf(err) {
	case NotFound:
		s.writeError(w, http.StatusNotFound, "unknown node %q", name)
	case Conflict:
		s.writeError(w, http.StatusConflict, "%v", err)
	case Timeout:
		s.writeError(w, http.StatusGatewayTimeout, "%v; the agent may still act on it", err)
	case Unsent:
		s.writeError(w, http.StatusBadGateway, "%v", err)
	case Unavailable:
		s.writeError(w, http.StatusServiceUnavailable, "%v", err)
	default:
		if r.Context().Err() != nil {
			// The client left; nobody reads an answer.
			return
		}
		s.writeError(w, http.StatusInternalServerError, "%v", err)
	}
}

// nodeAction reads the node named by the path and the body of an action on
// it (resume, drain, forget); on an error it answers and returns false.
func (s *Server) nodeAction(w http.ResponseWriter, r *http.Request) (string, api.ActionRequest, bool) {
	name, ok := s.pathNode(w, r)
	if !ok {
		return "", api.ActionRequest{}, false
	}
	req, ok := s.readAction(w, r)
	return name, req, ok
}

// readAction decodes the body of resume, drain and forget; on an error it
// answers (400, or 413 for a body over MaxBodyBytes) and returns false.
func (s *Server) readAction(w http.ResponseWriter, r *http.Request) (api.ActionRequest, bool) {
	return readBody(s, w, r, decodeAction)
}

// readBody decodes r's body (at most MaxBodyBytes) with decode, or answers
// 413 or 400 and returns false.
func readBody[T any](s *Server, w http.ResponseWriter, r *http.Request, decode func(io.Reader) (T, error)) (T, bool) {
	req, err := decode(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.writeError(w, http.StatusRequestEntityTooLarge, "request body larger than %d bytes", MaxBodyBytes)
			return req, false
		}
		s.writeError(w, http.StatusBadRequest, "%v", err)
		return req, false
	}
	return req, true
}

// handleForget removes a gone node from the view of every aggregator
// (Service.Forget); the body gives the reason, as for resume and drain.
func (s *Server) handleForget(w http.ResponseWriter, r *http.Request) {
	name, req, ok := s.nodeAction(w, r)
	if !ok {
		return
	}
	by := fmt.Sprintf("%s (HTTP from %s): %s", s.svc.Name(), r.RemoteAddr, req.Reason)
	if err := s.svc.Forget(r.Context(), name, by); err != nil {
		s.writeActionError(w, r, name, err)
		return
	}
	s.writeJSON(w, http.StatusOK, api.Forgotten{Name: name})
}

func (s *Server) handleConfig(w http.ResponseWriter, r *http.Request) {
	s.writeJSON(w, http.StatusOK, s.svc.ClusterConfig())
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	aggs, leader := s.svc.Aggregators()
	s.writeJSON(w, http.StatusOK, api.Health{
		Status:      "ok",
		Name:        s.svc.Name(),
		Version:     version.Version,
		Leader:      leader,
		Aggregators: aggs,
	})
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	rd := s.svc.Ready()
	code := http.StatusOK
	if !rd.Ready {
		code = http.StatusServiceUnavailable
	}
	s.writeJSON(w, code, rd)
}

// decodeAction decodes and checks a resume or drain body: exactly one JSON
// object with a reason, no unknown field, no trailing data.
func decodeAction(r io.Reader) (api.ActionRequest, error) {
	var req api.ActionRequest
	if err := decodeStrict(r, &req, `{"reason": "..."}`, "only reason"); err != nil {
		return req, err
	}
	return req, validateReason(req.Reason)
}

// decodeStrict decodes exactly one JSON object from r into v: no unknown
// field, no trailing data (jsonbody.Decode). Its errors say what was wrong
// for people, with shape (the object wanted) and fields (the fields it
// takes); an *http.MaxBytesError is returned as it is, for a 413.
func decodeStrict(r io.Reader, v any, shape, fields string) error {
	var e *jsonbody.Error
	if err := jsonbody.Decode(r, v); !errors.As(err, &e) {
		return err // nil
	}
	var mbe *http.MaxBytesError
	switch e.Kind {
	case jsonbody.Read:
		if errors.As(e.Err, &mbe) {
			return mbe
		}
		return fmt.Errorf("invalid body: %s", e.Err)
	case jsonbody.Empty:
		return errors.New("empty body: want " + shape)
	case jsonbody.Truncated:
		return errors.New("truncated JSON")
	case jsonbody.Syntax:
		return fmt.Errorf("invalid JSON at offset %d", e.Offset)
	case jsonbody.NotObject:
		return fmt.Errorf("want a JSON object %s, got %s", shape, e.Got)
	case jsonbody.WrongType:
		return fmt.Errorf("%s: want %s, got %s", e.Field, e.Want, e.Got)
	case jsonbody.UnknownField:
		return fmt.Errorf("unknown field %q (want %s)", e.Field, fields)
	case jsonbody.Trailing:
		return errors.New("trailing data after the JSON object")
	}
	return fmt.Errorf("invalid body: %s", e.Detail)
}

// validateReason checks the reason of a resume or drain.
func validateReason(reason string) error {
	switch {
	case strings.TrimSpace(reason) == "":
		return errors.New("reason: a reason is required")
	case len(reason) > MaxReasonBytes:
		return fmt.Errorf("reason: %d bytes, longer than %d", len(reason), MaxReasonBytes)
	case !utf8.ValidString(reason):
		return errors.New("reason: not valid UTF-8")
	}
	for _, r := range reason {
		if unicode.IsControl(r) {
			return errors.New("reason: holds a control character")
		}
	}
	return nil
}

func (s *Server) setWriteDeadline(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
}

func (s *Server) writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		s.log.Error("cannot encode a response", "err", err)
		code = http.StatusInternalServerError
		b, _ = json.Marshal(api.ErrorBody{Error: "cannot encode the response: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	s.setWriteDeadline(w)
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

func (s *Server) writeError(w http.ResponseWriter, code int, format string, a ...any) {
	s.writeJSON(w, code, api.ErrorBody{Error: fmt.Sprintf(format, a...)})
}
