package reservation

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// FakeScheduler is a Scheduler that holds reservations in memory the way
// Slurm does (a name is unique, an unknown node is refused, an update or
// a delete of an unknown name fails), with errors to inject. It is the
// test double of Command; safe for concurrent use.
type FakeScheduler struct {
	mu    sync.Mutex
	res   map[string]Reservation
	calls map[string]int
	// Fail, if set, is asked before each call with its verb ("list",
	// "create", "update", "delete") and reservation (only the name for
	// delete, none for list): an error fails the call and changes nothing.
	Fail func(verb string, r Reservation) error
	// Unknown are nodes the scheduler does not know: a create or update
	// naming one fails.
	Unknown map[string]bool
}

var _ Scheduler = (*FakeScheduler)(nil)

// NewFakeScheduler returns an empty FakeScheduler.
func NewFakeScheduler() *FakeScheduler {
	return &FakeScheduler{res: map[string]Reservation{}, calls: map[string]int{}}
}

func (f *FakeScheduler) check(v verb, r Reservation) error {
	f.calls[string(v)]++
	if f.Fail != nil {
		if err := f.Fail(string(v), r); err != nil {
			return err
		}
	}
	for _, n := range r.Nodes {
		if f.Unknown[n] {
			return fmt.Errorf("%s %s: invalid node name specified: %s", v, r.Name, n)
		}
	}
	return nil
}

// List returns every reservation held.
func (f *FakeScheduler) List(context.Context) ([]Reservation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(verbList, Reservation{}); err != nil {
		return nil, err
	}
	return f.reservationsLocked(), nil
}

// Create adds r unless its name is taken.
func (f *FakeScheduler) Create(_ context.Context, r Reservation) error {
	return f.put(verbCreate, r, false)
}

// Update replaces the nodes and end of the existing r.Name.
func (f *FakeScheduler) Update(_ context.Context, r Reservation) error {
	return f.put(verbUpdate, r, true)
}

// put stores r for v (create or update), which needs r.Name to exist
// already (exists) or not.
func (f *FakeScheduler) put(v verb, r Reservation, exists bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(v, r); err != nil {
		return err
	}
	switch _, ok := f.res[r.Name]; {
	case ok && !exists:
		return fmt.Errorf("%s %s: duplicate reservation name", v, r.Name)
	case !ok && exists:
		return fmt.Errorf("%s %s: reservation not found", v, r.Name)
	}
	f.res[r.Name] = clone(r)
	return nil
}

// Delete removes the reservation name.
func (f *FakeScheduler) Delete(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(verbDelete, Reservation{Name: name}); err != nil {
		return err
	}
	if _, ok := f.res[name]; !ok {
		return fmt.Errorf("delete %s: reservation not found", name)
	}
	delete(f.res, name)
	return nil
}

// Put adds or replaces r behind the planner's back (an administrator's
// reservation, or one left by another aggregator).
func (f *FakeScheduler) Put(r Reservation) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.res[r.Name] = clone(r)
}

// Remove deletes a reservation behind the planner's back.
func (f *FakeScheduler) Remove(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.res, name)
}

// Reservations returns what the scheduler holds, sorted by name.
func (f *FakeScheduler) Reservations() []Reservation {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reservationsLocked()
}

func (f *FakeScheduler) reservationsLocked() []Reservation {
	out := make([]Reservation, 0, len(f.res))
	for _, r := range f.res {
		out = append(out, clone(r))
	}
	slices.SortFunc(out, func(a, b Reservation) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Calls returns how many calls of verb were made, failed ones included.
func (f *FakeScheduler) Calls(verb string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[verb]
}

func clone(r Reservation) Reservation {
	r.Nodes = slices.Clone(r.Nodes)
	return r
}
