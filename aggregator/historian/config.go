package historian

import (
	"path/filepath"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/history"
	"github.com/gracewatch/gracewatch/internal/config"
)

// Config is the [history] table: the teardown history behind the
// grace advisor (docs/DESIGN.md §5d).
type Config struct {
	// Dir holds the history's segment files; empty: "history" under
	// state_dir; with neither, the history is off.
	Dir string `toml:"dir"`
	// MaxBytes bounds the files (the oldest segment is dropped first); at
	// least 1 MiB.
	MaxBytes config.Size `toml:"max_bytes"`
	// MaxAge drops the segments whose newest teardown started longer ago.
	MaxAge config.Duration `toml:"max_age"`
}

// DefaultConfig is the [history] table's defaults.
func DefaultConfig() Config {
	return Config{MaxBytes: config.Bytes(history.DefaultMaxBytes), MaxAge: config.Dur(history.DefaultMaxAge)}
}

// Validate checks the table; key prefixes the key names.
func (h Config) Validate(key string) error {
	errs := config.Problems{Prefix: key}
	if h.Dir != "" && !filepath.IsAbs(h.Dir) {
		errs.Add("dir", "must be an absolute path, got %q", h.Dir)
	}
	if n := h.MaxBytes.N(); n < history.MinMaxBytes || n > 1<<40 {
		errs.Add("max_bytes", "want 1MiB to 1TiB, got %d bytes", n)
	}
	if d := h.MaxAge.D(); d < time.Hour || d > 10*365*24*time.Hour {
		errs.Add("max_age", "want 1h to 10 years, got %v", d)
	}
	return errs.Err()
}

// Options returns the history's options with the state dir stateDir.
func (h Config) Options(stateDir string) history.Options {
	dir := h.Dir
	if dir == "" && stateDir != "" {
		dir = filepath.Join(stateDir, "history")
	}
	return history.Options{Dir: dir, MaxBytes: h.MaxBytes.N(), MaxAge: h.MaxAge.D()}
}
