package teardown

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
)

// FakeCgroups is an in-memory Cgroups for unit tests of the supervisor's
// logic (never the proof that a capability works: agent/cgroup's tests run
// the real kernel). Whether a cgroup is populated is set by the test
// (SetPopulated), which also calls the cgroup's watchers. Every operation
// can be made to fail (Fail), so that the supervisor's error paths are
// tested: a cgroup that cannot be made or removed, a kill or a signal that
// fails, a watch that cannot be set up (inotify's limit, ENOSPC).
//
// Start fails unless StartProcesses is set, in which case it starts the
// real process, in no cgroup. FakeCgroups is safe for concurrent use.
type FakeCgroups struct {
	// StartProcesses makes Start run the command (outside any cgroup).
	StartProcesses bool

	mu        sync.Mutex
	populated map[string]bool
	watchers  map[string][]*func()
	fail      map[string]error // by "op path" or "op *"
	signals   []string         // "path SIGNAL"
	kills     []string
	removed   []string
	created   []string
	reads     int // Populated calls: what an idle agent must not do
	v1reads   int // Procs calls of v1 cgroups
}

var _ Cgroups = (*FakeCgroups)(nil)

// Operations of Cgroups that Fail can make fail.
const (
	OpCreate    = "create"
	OpResolve   = "resolve"
	OpStart     = "start"
	OpSignal    = "signal"
	OpKill      = "kill"
	OpRemove    = "remove"
	OpPopulated = "populated"
	OpProcs     = "procs"
	OpWatch     = "watch"
)

// NewFakeCgroups returns a FakeCgroups with every cgroup empty.
func NewFakeCgroups() *FakeCgroups {
	return &FakeCgroups{populated: map[string]bool{}, watchers: map[string][]*func(){}, fail: map[string]error{}}
}

// Fail makes every later call of op (one of the Op constants) on path fail
// with err; path "*" is every path (for Create: every rel). A nil err
// removes the failure. The call is still recorded (Kills, Removed, ...).
func (f *FakeCgroups) Fail(op, path string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.fail, op+" "+path)
		return
	}
	f.fail[op+" "+path] = err
}

// failure returns the injected error of op on path; f.mu is held.
func (f *FakeCgroups) failure(op, path string) error {
	if err, ok := f.fail[op+" "+path]; ok {
		return err
	}
	return f.fail[op+" *"]
}

// Create returns /fake/rel.
func (f *FakeCgroups) Create(rel string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failure(OpCreate, rel); err != nil {
		return "", fmt.Errorf("create cgroup %s: %w", rel, err)
	}
	p := "/fake/" + rel
	f.created = append(f.created, p)
	return p, nil
}

// Resolve accepts any path but /missing and /not-allowed/...; one below
// /v1/ is a cgroup of a v1 hierarchy.
func (f *FakeCgroups) Resolve(p string) (Foreign, error) {
	f.mu.Lock()
	err := f.failure(OpResolve, p)
	f.mu.Unlock()
	switch {
	case err != nil:
		return Foreign{}, err
	case p == "/missing":
		return Foreign{}, errors.New("cgroup /missing does not exist")
	case strings.HasPrefix(p, "/not-allowed/"):
		return Foreign{}, fmt.Errorf("cgroup %s: not in the allow-list", p)
	case strings.HasPrefix(p, "/v1/"):
		return Foreign{Path: p, V1: true, Name: "freezer:" + strings.TrimPrefix(p, "/v1")}, nil
	}
	return Foreign{Path: p, Name: "0::" + p}, nil
}

// Procs lists pid 1000 for a populated cgroup; it counts v1 reads apart.
func (f *FakeCgroups) Procs(path string, v1 bool, max int) ([]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v1 {
		f.v1reads++
	}
	if err := f.failure(OpProcs, path); err != nil {
		return nil, err
	}
	if f.populated[path] {
		return []int{1000}, nil
	}
	return nil, nil
}

// V1Reads returns the number of Procs calls of v1 cgroups.
func (f *FakeCgroups) V1Reads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.v1reads
}

// Start starts cmd (in no cgroup) if StartProcesses is set, else fails.
func (f *FakeCgroups) Start(cmd *exec.Cmd, path string) error {
	f.mu.Lock()
	err := f.failure(OpStart, path)
	f.mu.Unlock()
	switch {
	case err != nil:
		return err
	case !f.StartProcesses:
		return fmt.Errorf("fake cgroups cannot start %s", cmd.Path)
	}
	return cmd.Start()
}

// Signal records "path SIGNAL" and counts one process in a populated
// cgroup.
func (f *FakeCgroups) Signal(path string, sig syscall.Signal) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.signals = append(f.signals, path+" "+sig.String())
	if err := f.failure(OpSignal, path); err != nil {
		return 0, err
	}
	if f.populated[path] {
		return 1, nil
	}
	return 0, nil
}

// Kill records path and counts one process.
func (f *FakeCgroups) Kill(path string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kills = append(f.kills, path)
	if err := f.failure(OpKill, path); err != nil {
		return 0, err
	}
	return 1, nil
}

// Remove records path.
func (f *FakeCgroups) Remove(path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, path)
	return f.failure(OpRemove, path)
}

// Populated returns what SetPopulated last set for path.
func (f *FakeCgroups) Populated(path string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if err := f.failure(OpPopulated, path); err != nil {
		return false, err
	}
	return f.populated[path], nil
}

// Watch registers fn, called by SetPopulated on path.
func (f *FakeCgroups) Watch(path string, fn func()) (func(), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failure(OpWatch, path); err != nil {
		return nil, fmt.Errorf("watch %s: %w", path, err)
	}
	p := &fn
	f.watchers[path] = append(f.watchers[path], p)
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		ws := f.watchers[path]
		for i, w := range ws {
			if w == p {
				f.watchers[path] = append(ws[:i], ws[i+1:]...)
				break
			}
		}
	}, nil
}

// SetPopulated changes a cgroup's state and fires its watchers.
func (f *FakeCgroups) SetPopulated(path string, v bool) {
	f.mu.Lock()
	f.populated[path] = v
	ws := append([]*func(){}, f.watchers[path]...)
	f.mu.Unlock()
	for _, w := range ws {
		(*w)()
	}
}

// Signals returns the signals sent, as "path SIGNAL".
func (f *FakeCgroups) Signals() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string{}, f.signals...)
}

// Reads returns the number of Populated calls.
func (f *FakeCgroups) Reads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

// Kills returns the paths Kill was called on, failed calls included.
func (f *FakeCgroups) Kills() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string{}, f.kills...)
}

// Created returns the paths Create made.
func (f *FakeCgroups) Created() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string{}, f.created...)
}

// Removed returns the paths Remove was called on, failed calls included.
func (f *FakeCgroups) Removed() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string{}, f.removed...)
}

// Watched reports whether path has a watcher.
func (f *FakeCgroups) Watched(path string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.watchers[path]) > 0
}
