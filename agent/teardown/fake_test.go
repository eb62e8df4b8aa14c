package teardown

// The tests' short names for the fakes beside the interfaces (fakes.go).
type fakeCgroups = FakeCgroups

func newFakeCgroups() *FakeCgroups { return NewFakeCgroups() }
