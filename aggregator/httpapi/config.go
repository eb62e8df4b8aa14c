package httpapi

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"path/filepath"

	"github.com/gracewatch/gracewatch/internal/config"
	"github.com/gracewatch/gracewatch/internal/secretfile"
)

// maxMaxWatchers is the largest http.max_watchers: each watcher holds a
// descriptor, and 65,536 is above any default limit of open files.
const maxMaxWatchers = 65536

// Config is the aggregator's [http] table: the scheduler-facing API.
type Config struct {
	// Listen is the TCP address of the API.
	Listen string `toml:"listen"`
	// AdminTokenFile holds the bearer token of the admin endpoints (POST
	// .../resume, .../drain, .../forget, /v1/jobs), which opens the read
	// endpoints too. It must not be readable or writable by others: the
	// aggregator refuses to start. Empty disables the admin endpoints (they
	// answer 403).
	AdminTokenFile string `toml:"admin_token_file"`
	// ReadTokenFile holds the read token, by the same file rules: set, the
	// read endpoints (/v1/nodes, /v1/nodes/{name}, /v1/watch, /v1/config,
	// /metrics) need it or the admin token, and it opens nothing else (the
	// admin endpoints answer it 403). It is what the status page, a
	// Prometheus or a script that only reads should hold. It must differ
	// from the admin token.
	ReadTokenFile string `toml:"read_token_file"`
	// TLSCert and TLSKey, both or neither, serve HTTPS.
	TLSCert string `toml:"tls_cert"`
	TLSKey  string `toml:"tls_key"`
	// ReadToken makes the read endpoints need a token even without
	// ReadTokenFile: then the admin token, which every reader would have to
	// hold (the configuration's warnings say so). Kept so that
	// configurations from before read_token_file keep working; with
	// ReadTokenFile it changes nothing. /healthz and /readyz never need a
	// token.
	ReadToken bool `toml:"read_token"`
	// MaxWatchers bounds the /v1/watch streams served at once (past it:
	// 503 with Retry-After); 0 or absent means DefaultMaxWatchers (256).
	MaxWatchers int `toml:"max_watchers"`
	// MaxConnsPerSource bounds the connections open at once from one IPv4
	// address or IPv6 /64 (past it a new one is closed at once), so that
	// one host cannot take the API's 1,024 slots; 0 or absent means
	// DefaultMaxConnsPerSource (64). Raise it for a proxy that many
	// clients share.
	MaxConnsPerSource int `toml:"max_conns_per_source"`
}

// Validate checks the table; key prefixes the key names ("http"). Every
// problem is reported, each naming its key.
func (h Config) Validate(key string) error {
	errs := config.Problems{Prefix: key}
	if _, port, err := net.SplitHostPort(h.Listen); err != nil || port == "" {
		errs.Add("listen", "want host:port, got %q", h.Listen)
	}
	if (h.TLSCert == "") != (h.TLSKey == "") {
		errs.Add("tls_cert", "tls_cert and tls_key go together (got only one)")
	}
	if h.MaxWatchers < 0 || h.MaxWatchers > maxMaxWatchers {
		errs.Add("max_watchers", "want 0 (the default, %d) to %d, got %d", DefaultMaxWatchers, maxMaxWatchers, h.MaxWatchers)
	}
	if h.MaxConnsPerSource < 0 || h.MaxConnsPerSource > DefaultMaxConns {
		errs.Add("max_conns_per_source", "want 0 (the default, %d) to %d (every connection the API holds), got %d", DefaultMaxConnsPerSource, DefaultMaxConns, h.MaxConnsPerSource)
	}
	if h.ReadToken && h.AdminTokenFile == "" && h.ReadTokenFile == "" {
		errs.Add("read_token", "needs http.read_token_file (or http.admin_token_file)")
	}
	if h.ReadTokenFile != "" && h.AdminTokenFile != "" && filepath.Clean(h.ReadTokenFile) == filepath.Clean(h.AdminTokenFile) {
		errs.Add("read_token_file", "is http.admin_token_file: the read token must differ from the admin token, or a reader could drain nodes")
	}
	return errs.Err()
}

// ErrSameToken is returned by LoadTokens when the read token is the admin
// token: it would open the admin endpoints to every reader.
var ErrSameToken = errors.New("http.read_token_file holds the same token as http.admin_token_file: a reader could drain nodes; make a new read token (head -c 32 /dev/urandom | base64)")

// LoadTokens reads h's token files, each by LoadToken's rules: the admin
// token (nil without http.admin_token_file) and the read token (nil without
// http.read_token_file). The two must differ (ErrSameToken). Errors name
// the key.
func (h Config) LoadTokens() (admin, read []byte, err error) {
	if h.AdminTokenFile != "" {
		if admin, err = LoadToken(h.AdminTokenFile); err != nil {
			return nil, nil, fmt.Errorf("key \"http.admin_token_file\": %w", err)
		}
	}
	if h.ReadTokenFile != "" {
		if read, err = LoadToken(h.ReadTokenFile); err != nil {
			return nil, nil, fmt.Errorf("key \"http.read_token_file\": %w", err)
		}
	}
	if admin != nil && read != nil && subtle.ConstantTimeCompare(admin, read) == 1 {
		return nil, nil, fmt.Errorf("key \"http.read_token_file\": %w", ErrSameToken)
	}
	return admin, read, nil
}

// LoadToken reads a token file (the admin or the read token): one line, at
// least MinTokenBytes long, without white space. It is a secret file, read
// by internal/secretfile's policy (mode 0600 or 0640; a token anyone on the
// host can read protects nothing, and the aggregator refuses to start).
func LoadToken(path string) ([]byte, error) {
	return secretfile.Token("token", path, MinTokenBytes)
}

// MinTokenBytes is the shortest token (admin or read) accepted.
const MinTokenBytes = 16
