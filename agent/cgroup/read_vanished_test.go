package cgroup

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
	"testing"
)

// A cgroup removed during a walk reads as ENOENT, or as ENODEV from a file
// of a cgroup being removed: both mean its processes are gone; other
// errors are not taken for that.
func TestVanished(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&fs.PathError{Op: "open", Path: "x/cgroup.procs", Err: syscall.ENODEV}, true},
		{&fs.PathError{Op: "open", Path: "x/cgroup.procs", Err: syscall.ENOENT}, true},
		{os.ErrNotExist, true},
		{&fs.PathError{Op: "open", Path: "x/cgroup.procs", Err: syscall.EACCES}, false},
		{errors.New("other"), false},
	} {
		if got := vanished(c.err); got != c.want {
			t.Errorf("vanished(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// goneErr makes ENODEV read as fs.ErrNotExist too (what Populated,
// ReadEvents' callers and the diagnosis test), and leaves other errors as
// they are.
func TestGoneErr(t *testing.T) {
	enodev := &fs.PathError{Op: "read", Path: "x/cgroup.events", Err: syscall.ENODEV}
	if err := goneErr(enodev); !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, syscall.ENODEV) {
		t.Errorf("goneErr(ENODEV) = %v: want it to wrap fs.ErrNotExist and ENODEV", err)
	}
	for _, err := range []error{os.ErrNotExist, &fs.PathError{Op: "open", Path: "x", Err: syscall.EACCES}, errors.New("other")} {
		if got := goneErr(err); got != err {
			t.Errorf("goneErr(%v) = %v, want it unchanged", err, got)
		}
	}
}
