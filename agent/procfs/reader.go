// Package procfs reads /proc for the hung-process diagnostics, with a time
// limit on every read, and parses what it reads.
//
// Reading /proc of a hung process can itself block: cmdline and environ take
// the target's mmap lock, which a task stuck in a page fault on a dead file
// system holds forever. A Reader therefore runs every read in a goroutine of
// its own and stops waiting after a timeout; a read that never returns costs
// one goroutine (and one OS thread), and the number of those is bounded.
//
// The parsers (ParseStat, ParseStatus, ParseMountinfo, ...) are pure functions
// of a file's bytes, tested against fixtures under testdata/.
//
// Why by hand and not through gopsutil/v4 (which the node's load, memory,
// uptime and state dir space do go through, internal/hostinfo): gopsutil has
// no wchan, kernel stack, syscall or pending-signal masks, its process reads
// (cmdline, status, open files) have no time limit, so one of them on a hung
// process would hang the diagnosis, and its Children scans all of /proc where
// cgroup.procs names the job's processes. This package is also linked by the
// agent's client, which must stay free of gopsutil.
package procfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gracewatch/gracewatch/internal/opt"
)

// Defaults of Options.
const (
	DefaultRoot       = "/proc"
	DefaultTimeout    = 2 * time.Second
	DefaultMaxBlocked = 16
	DefaultMaxBytes   = 1 << 20
)

var (
	// ErrBlocked is returned when a read did not return within the timeout.
	// The read goes on in the background and counts in Blocked until it
	// returns.
	ErrBlocked = errors.New("blocked")
	// ErrTooManyBlocked is returned at once, without reading, while
	// MaxBlocked reads are outstanding.
	ErrTooManyBlocked = errors.New("too many blocked reads")
)

// Options configures a Reader. Zero fields take the defaults.
type Options struct {
	// Root is the procfs mount (DefaultRoot); tests point it at a fixture
	// tree under testdata/.
	Root string
	// Timeout bounds each read (DefaultTimeout).
	Timeout time.Duration
	// MaxBlocked bounds the reads that timed out and have not returned yet
	// (DefaultMaxBlocked). Beyond it reads fail with ErrTooManyBlocked.
	MaxBlocked int
	// MaxBytes bounds what ReadFile returns (DefaultMaxBytes); the rest of a
	// longer file is not read.
	MaxBytes int64
}

// Reader reads files below Root with a per-read timeout and a bound on
// outstanding blocked reads. It is safe for concurrent use. Every method
// blocks its caller for at most the timeout (or until ctx is done).
type Reader struct {
	root       string
	timeout    time.Duration
	maxBlocked int
	maxBytes   int64

	mu      sync.Mutex
	blocked int // calls abandoned by their caller and not yet returned

	reads    atomic.Uint64
	timeouts atomic.Uint64
	refused  atomic.Uint64
}

// Stats counts a Reader's work since it was made.
type Stats struct {
	// Reads is how many reads were started.
	Reads uint64
	// Timeouts is how many reads did not return within the timeout.
	Timeouts uint64
	// Refused is how many reads failed with ErrTooManyBlocked.
	Refused uint64
	// Blocked is how many reads are outstanding now (see Reader.Blocked).
	Blocked int
}

// New returns a Reader configured by o.
func New(o Options) *Reader {
	r := &Reader{root: o.Root, timeout: o.Timeout, maxBlocked: o.MaxBlocked, maxBytes: o.MaxBytes}
	if r.root == "" {
		r.root = DefaultRoot
	}
	opt.Default(&r.timeout, DefaultTimeout)
	opt.Default(&r.maxBlocked, DefaultMaxBlocked)
	opt.Default(&r.maxBytes, DefaultMaxBytes)
	return r
}

// NewReader is New with the three settings of the agent's configuration
// (diagnostics.proc_root, read_timeout, max_blocked_reads); zero values take
// the defaults.
func NewReader(root string, timeout time.Duration, maxBlocked int) *Reader {
	return New(Options{Root: root, Timeout: timeout, MaxBlocked: maxBlocked})
}

// Root returns the procfs mount the Reader reads.
func (r *Reader) Root() string { return r.root }

// Path returns the absolute path of rel below Root.
func (r *Reader) Path(rel string) string { return filepath.Join(r.root, rel) }

// Blocked returns how many reads timed out (or were abandoned because their
// context ended) and have not returned yet.
func (r *Reader) Blocked() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.blocked
}

// Stats returns the Reader's counters.
func (r *Reader) Stats() Stats {
	return Stats{
		Reads:    r.reads.Load(),
		Timeouts: r.timeouts.Load(),
		Refused:  r.refused.Load(),
		Blocked:  r.Blocked(),
	}
}

// ReadFile reads rel (relative to Root), at most MaxBytes of it.
func (r *Reader) ReadFile(ctx context.Context, rel string) ([]byte, error) {
	v, err := r.doOpen(ctx, "read", rel, func(f *os.File) (any, error) {
		data, err := io.ReadAll(io.LimitReader(f, r.maxBytes))
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: f.Name(), Err: err}
		}
		return data, nil
	})
	b, _ := v.([]byte)
	return b, err
}

// Readlink returns the target of the symbolic link rel (relative to Root),
// without following it: /proc/PID/fd/N, cwd and root are read this way so
// that a suspect file system is never touched.
func (r *Reader) Readlink(ctx context.Context, rel string) (string, error) {
	v, err := r.do(ctx, "readlink", rel, func(path string) (any, error) {
		return os.Readlink(path)
	})
	s, _ := v.(string)
	return s, err
}

// ReadDirNames returns the names in directory rel (relative to Root), in
// directory order.
func (r *Reader) ReadDirNames(ctx context.Context, rel string) ([]string, error) {
	v, err := r.doOpen(ctx, "readdir", rel, func(f *os.File) (any, error) {
		return f.Readdirnames(-1)
	})
	names, _ := v.([]string)
	return names, err
}

// doOpen is do for fn on the file rel opened for reading, closed after fn.
func (r *Reader) doOpen(ctx context.Context, op, rel string, fn func(f *os.File) (any, error)) (any, error) {
	return r.do(ctx, op, rel, func(path string) (any, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return fn(f)
	})
}

// call is one read in flight. Its fields are guarded by Reader.mu.
type call struct {
	done      chan struct{}
	v         any
	err       error
	finished  bool
	abandoned bool
}

// do runs fn in a goroutine and waits for it up to the timeout. Under
// concurrent use Blocked can exceed MaxBlocked by at most the number of reads
// that were already in flight when the bound was reached.
func (r *Reader) do(ctx context.Context, op, rel string, fn func(path string) (any, error)) (any, error) {
	path := r.Path(rel)
	if err := ctx.Err(); err != nil {
		return nil, &fs.PathError{Op: op, Path: path, Err: err}
	}
	r.mu.Lock()
	full := r.blocked >= r.maxBlocked
	r.mu.Unlock()
	if full {
		r.refused.Add(1)
		return nil, &fs.PathError{Op: op, Path: path, Err: ErrTooManyBlocked}
	}
	r.reads.Add(1)
	c := &call{done: make(chan struct{})}
	go func() {
		v, err := fn(path)
		r.mu.Lock()
		c.v, c.err, c.finished = v, err, true
		if c.abandoned {
			r.blocked--
		}
		r.mu.Unlock()
		close(c.done)
	}()

	t := time.NewTimer(r.timeout)
	defer t.Stop()
	var why error
	select {
	case <-c.done:
		return c.v, c.err
	case <-t.C:
		why = ErrBlocked
	case <-ctx.Done():
		why = ctx.Err()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.finished { // it returned while we gave up
		return c.v, c.err
	}
	c.abandoned = true
	r.blocked++
	if why == ErrBlocked {
		r.timeouts.Add(1)
	}
	return nil, &fs.PathError{Op: op, Path: path, Err: why}
}

// IsGone reports whether err means that the process or thread whose file was
// read no longer exists (or is a zombie without that file).
func IsGone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// Reason returns a short, lowercase cause of a read error for a report:
// "blocked", "too many blocked reads", "permission denied", or the error
// below the path.
func Reason(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrBlocked):
		return "blocked"
	case errors.Is(err, ErrTooManyBlocked):
		return ErrTooManyBlocked.Error()
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// Unreadable formats a read error of a named item for a report:
// "cmdline unreadable: blocked".
func Unreadable(what string, err error) string {
	return fmt.Sprintf("%s unreadable: %s", what, Reason(err))
}
