package cgroup_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/gracewatch/gracewatch/agent/cgroup"
)

// A cgroup file opened before its cgroup is removed reads ENODEV from the
// kernel (kernfs), not ENOENT: the race of a read with the removal. It
// must read as gone (fs.ErrNotExist), so that Populated says "not
// populated" and callers of ReadEvents see the cgroup gone, as for ENOENT.
func TestReadOfARemovedCgroup(t *testing.T) {
	m := newManager(t, cgroup.Options{})
	p := create(t, m, "removed")
	f, err := os.Open(filepath.Join(p, "cgroup.events"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := m.Remove(p); err != nil {
		t.Fatal(err)
	}
	_, err = cgroup.ReadKVFrom(f)
	if !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("read of a removed cgroup's file: %v, want ENODEV from the kernel", err)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read of a removed cgroup's file: %v, want it to wrap fs.ErrNotExist (the cgroup is gone)", err)
	}
	if pop, err := cgroup.Populated(p); pop || err != nil {
		t.Fatalf("Populated of a removed cgroup = %v, %v; want false, nil", pop, err)
	}
}
