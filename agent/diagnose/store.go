package diagnose

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gracewatch/gracewatch/agent/jobname"
	"github.com/gracewatch/gracewatch/internal/fsutil"
)

// ErrNoReport is returned by Store.Latest when the store holds no report of
// the job.
var ErrNoReport = errors.New("no report")

// DefaultMaxReports is the bound of a Store given a max below 1.
const DefaultMaxReports = 100

const (
	reportExt    = ".json"
	tempPrefix   = ".tmp-"
	nameTime     = "20060102T150405.000000000Z"
	maxJobInName = 64
)

// Store keeps reports as JSON files in one directory, at most max of them.
// File names start with the report's time (UTC, fixed width) so that they
// sort by time, followed by the job's name (jobname.Of). It is safe
// for concurrent use within one process; its methods block on file I/O.
type Store struct {
	dir string
	max int

	mu sync.Mutex
}

// NewStore opens (creating it with mode 0700 if needed) the report directory
// dir, keeping at most max reports. Temporary files left by a crash are
// removed.
func NewStore(dir string, max int) (*Store, error) {
	if max < 1 {
		max = DefaultMaxReports
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("report store: %w", err)
	}
	stale, err := filepath.Glob(filepath.Join(dir, tempPrefix+"*"))
	if err != nil {
		return nil, fmt.Errorf("report store %s: %w", dir, err)
	}
	for _, p := range stale {
		_ = os.Remove(p)
	}
	return &Store{dir: dir, max: max}, nil
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// Save writes r atomically (temporary file, fsync, rename, fsync of the
// directory) and then deletes the oldest reports beyond the bound. It
// returns the new file's path.
func (s *Store) Save(r *Report) (string, error) {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", fmt.Errorf("save report of job %s: %w", r.Job, err)
	}
	data = append(data, '\n')

	s.mu.Lock()
	defer s.mu.Unlock()
	taken := r.Taken
	if taken.IsZero() {
		taken = time.Now()
	}
	stem := taken.UTC().Format(nameTime) + "_" + jobname.Of(r.Job)
	path := filepath.Join(s.dir, stem+reportExt)
	for i := 2; exists(path); i++ {
		path = filepath.Join(s.dir, fmt.Sprintf("%s~%d%s", stem, i, reportExt))
	}
	if err := writeAtomic(path, data); err != nil {
		return "", fmt.Errorf("save report of job %s: %w", r.Job, err)
	}
	if err := s.prune(); err != nil {
		return path, fmt.Errorf("save report of job %s: %w", r.Job, err)
	}
	return path, nil
}

// List returns the paths of the stored reports, oldest first.
func (s *Store) List() ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.list()
}

func (s *Store) list() ([]string, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("list reports: %w", err)
	}
	var paths []string
	for _, e := range ents {
		n := e.Name()
		if e.Type().IsRegular() && strings.HasSuffix(n, reportExt) && !strings.HasPrefix(n, ".") {
			paths = append(paths, filepath.Join(s.dir, n))
		}
	}
	slices.Sort(paths)
	return paths, nil
}

// Latest returns the newest report of job, or an error wrapping ErrNoReport.
func (s *Store) Latest(job string) (*Report, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	paths, err := s.list()
	if err != nil {
		return nil, err
	}
	own, legacy := jobname.Of(job), legacyName(job)
	for _, p := range slices.Backward(paths) {
		stem, _, _ := strings.Cut(strings.TrimSuffix(filepath.Base(p), reportExt), "~")
		if _, name, _ := strings.Cut(stem, "_"); name != own && name != legacy {
			continue
		}
		r, err := Load(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		// Reports saved by an earlier agent are named by legacyName, which
		// two job ids can share: the report says whose it is.
		if r.Job == job {
			return r, nil
		}
	}
	return nil, fmt.Errorf("job %s: %w", job, ErrNoReport)
}

// Load reads the report at path.
func Load(path string) (*Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load report: %w", err)
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("load report %s: %w", path, err)
	}
	return &r, nil
}

// prune deletes the oldest reports beyond max.
func (s *Store) prune() error {
	paths, err := s.list()
	if err != nil {
		return err
	}
	var errs []error
	for len(paths) > s.max {
		if err := os.Remove(paths[0]); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("prune reports: %w", err))
		}
		paths = paths[1:]
	}
	return errors.Join(errs...)
}

// legacyName is how reports were named before jobname.Of (ASCII letters,
// digits, '.', '-' and '+' kept, every other byte '_', at most 64 bytes):
// Latest still finds them. Different ids can give the same legacy name.
func legacyName(job string) string {
	var b strings.Builder
	for i := 0; i < len(job) && b.Len() < maxJobInName; i++ {
		c := job[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '+' || c == '.' && i > 0
		if ok {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "_"
	}
	return b.String()
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// writeAtomic writes data to path through a temporary file in the same
// directory (named tempPrefix..., which a restart removes), with fsync of
// the file and of the directory.
func writeAtomic(path string, data []byte) error {
	return fsutil.WriteFileAtomic(path, data, 0o600, tempPrefix+"*")
}
