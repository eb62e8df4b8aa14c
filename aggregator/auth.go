package aggregator

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"unicode"
)

type access int

const (
	public access = iota // never a token
	read                 // a token with ReadToken
	admin                // always a token
)

// authorize checks the bearer token where acc asks for it; it answers 401
// or 403 itself and returns false.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, acc access) bool {
	if acc == public || (acc == read && !s.opts.ReadToken) {
		return true
	}
	if len(s.opts.Token) == 0 {
		s.writeError(w, http.StatusForbidden, "admin endpoints are disabled: the aggregator has no http.admin_token_file")
		return false
	}
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="gracewatch"`)
		s.writeError(w, http.StatusUnauthorized, "missing bearer token (Authorization: Bearer <token>)")
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	if subtle.ConstantTimeCompare(sum[:], s.token[:]) != 1 {
		w.Header().Set("WWW-Authenticate", `Bearer realm="gracewatch", error="invalid_token"`)
		s.log.Warn("wrong bearer token", "remote", r.RemoteAddr, "path", r.URL.Path)
		s.writeError(w, http.StatusUnauthorized, "wrong bearer token")
		return false
	}
	return true
}

// hasToken reports whether r carries the admin token, without answering.
func (s *Server) hasToken(r *http.Request) bool {
	if len(s.opts.Token) == 0 {
		return false
	}
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(sum[:], s.token[:]) == 1
}

// LoadToken reads the admin token file: one line, at least MinTokenBytes
// long. The file must be a regular file that others can neither read nor
// write (mode 0600 or 0640): a token anyone on the host can read protects
// nothing, and the aggregator refuses to start.
func LoadToken(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("admin token: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("admin token: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("admin token %s: not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o007 != 0 {
		return nil, fmt.Errorf("admin token %s: mode %04o lets others read or write it; chmod o-rwx it", path, perm)
	}
	data, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return nil, fmt.Errorf("admin token %s: %w", path, err)
	}
	tok := strings.TrimSpace(string(data))
	switch {
	case len(tok) < MinTokenBytes:
		return nil, fmt.Errorf("admin token %s: %d bytes, want at least %d (e.g. head -c 32 /dev/urandom | base64)", path, len(tok), MinTokenBytes)
	case strings.ContainsFunc(tok, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		return nil, fmt.Errorf("admin token %s: holds white space or control characters (want one line)", path)
	}
	return []byte(tok), nil
}
