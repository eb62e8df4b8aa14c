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
