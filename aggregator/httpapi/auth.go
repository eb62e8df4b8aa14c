package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"strings"
	"time"
)

// The HTTP API has two bearer tokens:
//
//   - the admin token (http.admin_token_file) opens every endpoint, the
//     admin ones (resume, drain, forget, jobs) included;
//   - the read token (http.read_token_file) opens the read endpoints only
//     (the node list and detail, the watch, the config, /metrics): what a
//     status page in a browser, a Prometheus or a monitoring script holds,
//     none of which must be able to drain a node.
//
// With a read token, or with http.read_token (the older switch, which has
// the read endpoints take the admin token), the read endpoints need one of
// the two; without either they are open. /healthz, /readyz and the status
// page's HTML (which holds no data: the page reads the API with the token
// typed into it) are always open. A report's detail (command lines, open
// files) on GET /v1/nodes/{name} needs one of the two tokens whatever the
// setting.

type access int

const (
	public access = iota // never a token
	read                 // the read or the admin token, when reads are guarded
	admin                // always the admin token
)

// tokenKind is which configured token a request carries.
type tokenKind int

const (
	noToken    tokenKind = iota // none, or a token that matches neither
	readToken                   // the read token
	adminToken                  // the admin token
)

// bearer returns the bearer token of r's Authorization header.
func bearer(r *http.Request) (string, bool) {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "", false
	}
	return tok, true
}

// match says which configured token tok is. Both are compared, in constant
// time, whatever the first answer.
func (s *Server) match(tok string) tokenKind {
	sum := sha256.Sum256([]byte(tok))
	isAdmin := len(s.opts.Token) > 0 && subtle.ConstantTimeCompare(sum[:], s.adminSum[:]) == 1
	isRead := len(s.opts.ReadToken) > 0 && subtle.ConstantTimeCompare(sum[:], s.readSum[:]) == 1
	switch {
	case isAdmin:
		return adminToken
	case isRead:
		return readToken
	}
	return noToken
}

// tokenOf says which configured token r carries, without answering.
func (s *Server) tokenOf(r *http.Request) tokenKind {
	tok, ok := bearer(r)
	if !ok {
		return noToken
	}
	return s.match(tok)
}

// readsGuarded reports whether the read endpoints need a token.
func (s *Server) readsGuarded() bool { return s.opts.GuardReads || len(s.opts.ReadToken) > 0 }

// authorize checks the bearer token where acc asks for it; it answers 401
// or 403 itself and returns false.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, acc access) bool {
	if acc == public || (acc == read && !s.readsGuarded()) {
		return true
	}
	switch {
	case acc == admin && len(s.opts.Token) == 0:
		s.writeError(w, http.StatusForbidden, "admin endpoints are disabled: the aggregator has no http.admin_token_file")
		return false
	case acc == read && len(s.opts.Token) == 0 && len(s.opts.ReadToken) == 0:
		// Config.Validate refuses http.read_token without a token file.
		s.writeError(w, http.StatusForbidden, "read endpoints need a token and the aggregator has none (http.read_token_file, http.admin_token_file)")
		return false
	}
	tok, ok := bearer(r)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="gracewatch"`)
		s.writeError(w, http.StatusUnauthorized, "missing bearer token (Authorization: Bearer <token>)")
		return false
	}
	switch s.match(tok) {
	case adminToken:
		return true
	case readToken:
		if acc == read {
			return true
		}
		s.logAuth(r, "read token on an admin endpoint")
		w.Header().Set("WWW-Authenticate", `Bearer realm="gracewatch", error="insufficient_scope"`)
		s.writeError(w, http.StatusForbidden, "%s %s needs the admin token (http.admin_token_file); this is the read token (http.read_token_file), which opens the read endpoints only", r.Method, r.URL.Path)
		return false
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="gracewatch", error="invalid_token"`)
	s.logAuth(r, "wrong bearer token")
	s.writeError(w, http.StatusUnauthorized, "wrong bearer token")
	return false
}

// authLogEvery spaces the log lines of refused tokens from one remote
// host; ratelog.Burst bounds them in all.
const authLogEvery = 10 * time.Second

// logAuth logs a refused token: once per remote host and authLogEvery, at
// most ratelog.Burst lines per interval in all, with the count of those
// held back (a client with a wrong token, or a guesser, sends thousands a
// second).
func (s *Server) logAuth(r *http.Request, msg string) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if ok, suppressed := s.authLog.Allow(host, time.Now()); ok {
		s.log.Warn(msg, "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path, "suppressed", suppressed)
	}
}
