package teardown

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
)

// fakeCgroups is an in-memory Cgroups for tests of the supervisor's logic.
// Populated state is set by the test; watchers are called by SetPopulated.
type fakeCgroups struct {
	mu        sync.Mutex
	populated map[string]bool
	watchers  map[string][]*func()
	signals   []string // "path SIGNAL"
	kills     []string
	removed   []string
	reads     int // Populated calls: what an idle agent must not do
	v1reads   int // Procs calls of v1 cgroups
}

var _ Cgroups = (*fakeCgroups)(nil)

func newFakeCgroups() *fakeCgroups {
	return &fakeCgroups{populated: map[string]bool{}, watchers: map[string][]*func(){}}
}

func (f *fakeCgroups) Create(rel string) (string, error) { return "/fake/" + rel, nil }

// Resolve accepts any path but /missing and /not-allowed/...; one below
// /v1/ is a cgroup of a v1 hierarchy.
func (f *fakeCgroups) Resolve(p string) (Foreign, error) {
	switch {
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
func (f *fakeCgroups) Procs(path string, v1 bool, max int) ([]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v1 {
		f.v1reads++
	}
	if f.populated[path] {
		return []int{1000}, nil
	}
	return nil, nil
}

func (f *fakeCgroups) V1Reads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.v1reads
}

func (f *fakeCgroups) Start(cmd *exec.Cmd, path string) error {
	return fmt.Errorf("fake cgroups cannot start %s", cmd.Path)
}

func (f *fakeCgroups) Signal(path string, sig syscall.Signal) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.signals = append(f.signals, path+" "+sig.String())
	if f.populated[path] {
		return 1, nil
	}
	return 0, nil
}

func (f *fakeCgroups) Kill(path string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kills = append(f.kills, path)
	return 1, nil
}

func (f *fakeCgroups) Remove(path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, path)
	return nil
}

func (f *fakeCgroups) Populated(path string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	return f.populated[path], nil
}

func (f *fakeCgroups) Watch(path string, fn func()) (func(), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
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
func (f *fakeCgroups) SetPopulated(path string, v bool) {
	f.mu.Lock()
	f.populated[path] = v
	ws := append([]*func(){}, f.watchers[path]...)
	f.mu.Unlock()
	for _, w := range ws {
		(*w)()
	}
}

func (f *fakeCgroups) Signals() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string{}, f.signals...)
}

func (f *fakeCgroups) Reads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}
