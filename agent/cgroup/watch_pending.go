package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// pendingWatch is a Watch of a cgroup that does not exist yet: it waits in
// the nearest existing ancestor directory (the directory watch at) for the
// next level towards dir to be created. Guarded by the watcher's mu.
type pendingWatch struct {
	dir     string
	at      int32 // wd of the directory it waits in; 0 while it waits nowhere
	entries []*watchEntry
}

// await makes pw wait in the deepest existing directory on the way to its
// cgroup, and reports ready once the cgroup itself exists. A level created
// between the look and the watch is seen: after each watch the next level
// is looked at again. Called under mu.
func (w *watcher) await(pw *pendingWatch) (ready bool, err error) {
	for {
		at := w.nearest(pw.dir)
		if at == pw.dir {
			return true, nil
		}
		wd, dw, err := w.watchDir(at)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			continue // removed since the look: look again, higher up
		}
		if err != nil {
			return false, err
		}
		if pw.at != wd {
			w.leave(pw)
			pw.at = wd
			dw.waiters[pw] = true
		}
		next, _, _ := strings.Cut(strings.TrimPrefix(pw.dir, at+"/"), "/")
		if !isDir(filepath.Join(at, next)) {
			return false, nil
		}
	}
}

// nearest returns dir or its nearest existing ancestor, not above the mount.
func (w *watcher) nearest(dir string) string {
	p := dir
	for p != w.mount && !isDir(p) {
		p = filepath.Dir(p)
	}
	return p
}

// leave takes pw out of the directory it waits in. Called under mu.
func (w *watcher) leave(pw *pendingWatch) {
	if pw.at == 0 {
		return
	}
	if dw := w.dirs[pw.at]; dw != nil {
		delete(dw.waiters, pw)
		w.unwatchDir(pw.at)
	}
	pw.at = 0
}

// settle turns pw, whose cgroup exists, into a file watch of its
// cgroup.events. Called under mu.
func (w *watcher) settle(pw *pendingWatch) error {
	w.leave(pw)
	for _, e := range pw.entries {
		if err := w.addFile(pw.dir, e); err != nil {
			return err
		}
	}
	return nil
}

// reawait moves pw on after a change in the directory it waits in, and
// returns its entries to call once its cgroup exists (and is watched). A
// cgroup removed again at once is awaited again. Called under mu.
func (w *watcher) reawait(pw *pendingWatch) []*watchEntry {
	for {
		ready, err := w.await(pw)
		if err != nil {
			w.log.Warn("cannot await cgroup", "cgroup", pw.dir, "err", err)
			return nil
		}
		if !ready {
			return nil
		}
		err = w.settle(pw)
		if err == nil {
			return pw.entries
		}
		if !errors.Is(err, unix.ENOENT) {
			w.log.Warn("cannot watch created cgroup", "cgroup", pw.dir, "err", err)
			return nil
		}
		// Removed between its creation and the watch: entries that were
		// added to a file watch are taken back, and pw waits again.
		for _, e := range pw.entries {
			if e.pending == nil {
				w.forgetFile(e)
				e.pending = pw
			}
		}
	}
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
