package diagnose

import (
	"context"
	"fmt"

	"github.com/gracewatch/gracewatch/agent/procfs"
)

// entry reads the files of one /proc directory, a process's (PID/) or a
// thread's (PID/task/TID/), through the Snapshotter's bounded Reader, and
// notes in errs what it could not read or parse. Process and Thread read the
// same files with the same rules; this is the one place those rules live.
// Each read is bounded in time by the Reader. Not safe for concurrent use.
type entry struct {
	ctx  context.Context
	proc *procfs.Reader
	dir  string    // relative to the Reader's root, ending in "/"
	errs *[]string // Process.Errors or Thread.Errors
}

func (s *Snapshotter) entry(ctx context.Context, dir string, errs *[]string) entry {
	return entry{ctx: ctx, proc: s.proc, dir: dir, errs: errs}
}

func (e entry) errorf(format string, a ...any) {
	*e.errs = append(*e.errs, fmt.Sprintf(format, a...))
}

// stat reads and parses dir/stat (see readParsed).
func (e entry) stat() (procfs.Stat, bool, bool) { return readParsed(e, "stat", procfs.ParseStat) }

// status reads and parses dir/status (see readParsed).
func (e entry) status() (procfs.Status, bool, bool) {
	return readParsed(e, "status", procfs.ParseStatus)
}

// readParsed reads dir/name and parses it. alive is false when the process
// or thread is gone; ok is true when v holds the parsed file. A file that
// cannot be read or parsed while the entry lives is noted in errs.
func readParsed[T any](e entry, name string, parse func([]byte) (T, error)) (v T, ok, alive bool) {
	data, err := e.proc.ReadFile(e.ctx, e.dir+name)
	switch {
	case procfs.IsGone(err):
		return v, false, false
	case err != nil:
		e.errorf("%s", procfs.Unreadable(name, err))
		return v, false, true
	}
	if v, err = parse(data); err != nil {
		e.errorf("%v", err)
		return v, false, true
	}
	return v, true, true
}

// readOptional reads dir/name with read (the Reader's ReadFile or
// Readlink). ok is true when v holds it. A file that is gone is not noted:
// a zombie or a kernel thread has no exe, and the entry may exit between
// reads (stat and status, read first, say whether it lives).
func readOptional[T any](e entry, name string, read func(context.Context, string) (T, error)) (v T, ok bool) {
	v, err := read(e.ctx, e.dir+name)
	if err != nil {
		if !procfs.IsGone(err) {
			e.errorf("%s", procfs.Unreadable(name, err))
		}
		return v, false
	}
	return v, true
}
