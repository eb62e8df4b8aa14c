package cgroup

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Watch calls fn after every change of path/cgroup.events (populated, frozen),
// through the manager's single inotify instance (IN_MODIFY). path may be a
// foreign cgroup below Mount: watching only reads.
//
// fn runs on the manager's watcher goroutine and must not block: it delays
// every other watch. Events coalesce, so fn gets no payload: it re-reads the
// file (ReadEvents). Changes before Watch returns are not replayed, so read
// the file once after Watch (and add the watch before starting processes).
// Several Watch calls on one path each get their callbacks, in registration
// order.
//
// A cgroup below the cgroup2 mount that does not exist yet is awaited
// (exec systems create a job's cgroup when its first step starts, after the
// job is registered): the manager watches the nearest existing ancestor
// directory for IN_CREATE, moves down as the levels appear, and once the
// cgroup exists watches it as any other and calls fn, without polling. A
// cgroup awaited holds one inotify watch at a time (on the directory it
// waits in, shared with other watches of that directory); cancel removes
// it. When the cgroup is removed (rmdir), fn is called one last time and
// the watch ends (cgroupfs sends nothing on the removed file itself, so the
// manager also watches the parent directory for IN_DELETE; an IN_IGNORED on
// the file does the same). On an inotify queue overflow every callback is
// called.
//
// cancel removes this callback (and the inotify watch with the last one); it
// is idempotent, may be called from fn, and after it returns fn is not started
// again, though a call already running on the watcher goroutine may still be
// finishing. Watch is safe for concurrent use.
func (m *Manager) Watch(path string, fn func()) (cancel func(), err error) {
	p, err := m.below("watch", path)
	if err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, fmt.Errorf("watch %s: nil callback", p)
	}
	return m.w.add(p, fn)
}

// watcher multiplexes the callbacks of all watches over one inotify fd.
//
// Each watched cgroup has a file watch on its cgroup.events (IN_MODIFY; one
// wd per inode, shared by the Watch calls on that path) and a watch on its
// parent directory (IN_DELETE, shared by siblings) that tells when the cgroup
// is removed: kernfs sends neither IN_DELETE_SELF nor IN_IGNORED to watches
// of a removed cgroup's files, which would otherwise pin their inodes until
// canceled.
type watcher struct {
	log  *slog.Logger
	file *os.File // the nonblocking inotify fd, read through the runtime poller
	fd   int      // file's descriptor, used for add/rm watch under mu while !closed
	done chan struct{}

	mu     sync.Mutex
	closed bool
	files  map[int32]*fileWatch // by wd of cgroup.events
	dirs   map[int32]*dirWatch  // by wd of a watched cgroup's parent, or of a directory a pending watch waits in
	mount  string               // the cgroup2 mount: pending watches wait below it

	closeOnce sync.Once
	closeErr  error
}

// fileWatch is the watch of one cgroup's cgroup.events.
type fileWatch struct {
	dir     string // the cgroup
	ino     uint64 // inode of cgroup.events, to tell a re-created cgroup apart
	parent  int32  // wd of the parent directory watch
	entries []*watchEntry
}

// dirWatch is the watch of a directory (mask dirMask): its watched children
// by name, whose removal it tells, and the pending watches waiting in it for
// their next level to be created.
type dirWatch struct {
	path     string
	children map[string]int32
	waiters  map[*pendingWatch]bool
}

// dirMask is the mask of every directory watch: one inode has one wd, and a
// second inotify_add_watch would replace the first one's mask.
const dirMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_ONLYDIR

type watchEntry struct {
	fn       func()
	canceled atomic.Bool   // set by cancel; read by the watcher goroutine
	dropped  bool          // the watch ended (cgroup removed); guarded by mu
	wd       int32         // its file watch, once the cgroup exists; guarded by mu
	pending  *pendingWatch // while the cgroup does not exist; guarded by mu
}

func newWatcher(log *slog.Logger, mount string) (*watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	// A nonblocking fd makes os.NewFile register it with the runtime poller,
	// so Read parks the goroutine and Close wakes it with os.ErrClosed.
	w := &watcher{
		log:   log,
		mount: mount,
		file:  os.NewFile(uintptr(fd), "inotify"),
		fd:    fd,
		done:  make(chan struct{}),
		files: make(map[int32]*fileWatch),
		dirs:  make(map[int32]*dirWatch),
	}
	go w.run()
	return w, nil
}

func (w *watcher) add(dir string, fn func()) (func(), error) {
	file := filepath.Join(dir, "cgroup.events")
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, fmt.Errorf("watch %s: %w", file, ErrClosed)
	}
	e := &watchEntry{fn: fn}
	err := w.addFile(dir, e)
	if errors.Is(err, unix.ENOENT) && within(dir, w.mount) && dir != w.mount {
		pw := &pendingWatch{dir: dir, entries: []*watchEntry{e}}
		e.pending = pw
		var ready bool
		if ready, err = w.await(pw); err == nil && ready {
			// Created meanwhile: the caller reads it after Watch returns.
			err = w.settle(pw)
		}
	}
	if err != nil {
		w.forget(e)
		return nil, err
	}
	return func() { w.cancel(e) }, nil
}

// addFile adds e to the file watch of dir's cgroup.events, made if needed.
// Called under mu; the error wraps ENOENT when the cgroup does not exist.
func (w *watcher) addFile(dir string, e *watchEntry) error {
	file := filepath.Join(dir, "cgroup.events")
	// The same inode gives the same wd: the entries are kept per wd.
	wd, err := unix.InotifyAddWatch(w.fd, file, unix.IN_MODIFY)
	if err != nil {
		return fmt.Errorf("watch %s: %w", file, err)
	}
	fw := w.files[int32(wd)]
	if fw == nil {
		fw, err = w.newFileWatch(int32(wd), dir, file)
		if err != nil {
			w.rmWatch(int32(wd))
			return err
		}
	}
	e.wd, e.pending = int32(wd), nil
	fw.entries = append(fw.entries, e)
	return nil
}

// newFileWatch registers the file watch wd and the watch of its parent.
func (w *watcher) newFileWatch(wd int32, dir, file string) (*fileWatch, error) {
	var st unix.Stat_t
	if err := unix.Stat(file, &st); err != nil {
		return nil, fmt.Errorf("watch %s: %w", file, err)
	}
	parent := filepath.Dir(dir)
	pwd, dw, err := w.watchDir(parent)
	if err != nil {
		return nil, fmt.Errorf("watch %s for removals: %w", parent, err)
	}
	// A stale wd under the same name (a removed cgroup whose IN_DELETE is
	// still queued) is replaced: the inode check in collect sorts them out.
	dw.children[filepath.Base(dir)] = wd
	fw := &fileWatch{dir: dir, ino: st.Ino, parent: pwd}
	w.files[wd] = fw
	return fw, nil
}

// watchDir adds (or finds) the watch of directory dir. Called under mu.
func (w *watcher) watchDir(dir string) (int32, *dirWatch, error) {
	wd, err := unix.InotifyAddWatch(w.fd, dir, dirMask)
	if err != nil {
		return 0, nil, err
	}
	dw := w.dirs[int32(wd)]
	if dw == nil {
		dw = &dirWatch{path: dir, children: make(map[string]int32), waiters: make(map[*pendingWatch]bool)}
		w.dirs[int32(wd)] = dw
	}
	return int32(wd), dw, nil
}

// unwatchDir removes directory watch wd once nothing uses it. Called under
// mu.
func (w *watcher) unwatchDir(wd int32) {
	if dw := w.dirs[wd]; dw != nil && len(dw.children) == 0 && len(dw.waiters) == 0 {
		delete(w.dirs, wd)
		w.rmWatch(wd)
	}
}

func (w *watcher) cancel(e *watchEntry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e.canceled.Swap(true) || w.closed || e.dropped {
		return
	}
	w.forget(e)
}

// forget removes e from its file watch or pending watch, and the inotify
// watches nothing uses any more. Called under mu.
func (w *watcher) forget(e *watchEntry) {
	if pw := e.pending; pw != nil {
		e.pending = nil
		pw.entries = slices.DeleteFunc(pw.entries, func(x *watchEntry) bool { return x == e })
		if len(pw.entries) == 0 {
			w.leave(pw)
		}
		return
	}
	w.forgetFile(e)
}

// forgetFile removes e from its file watch. Called under mu.
func (w *watcher) forgetFile(e *watchEntry) {
	wd := e.wd
	fw := w.files[wd]
	if fw == nil {
		return
	}
	for i, x := range fw.entries {
		if x == e {
			fw.entries = append(fw.entries[:i:i], fw.entries[i+1:]...)
			break
		}
	}
	if len(fw.entries) == 0 {
		w.drop(wd)
		w.rmWatch(wd)
	}
}

// drop forgets the file watch wd (and its parent's watch when it was the last
// child there), marks its entries dropped and returns them. Called under mu.
func (w *watcher) drop(wd int32) []*watchEntry {
	fw := w.files[wd]
	if fw == nil {
		return nil
	}
	delete(w.files, wd)
	if dw := w.dirs[fw.parent]; dw != nil {
		name := filepath.Base(fw.dir)
		if dw.children[name] == wd {
			delete(dw.children, name)
		}
		w.unwatchDir(fw.parent)
	}
	for _, e := range fw.entries {
		e.dropped = true
	}
	return fw.entries
}

// rmWatch removes an inotify watch. EINVAL means the kernel has dropped it
// already (its IN_IGNORED is queued). Called under mu.
func (w *watcher) rmWatch(wd int32) {
	if _, err := unix.InotifyRmWatch(w.fd, uint32(wd)); err != nil && !errors.Is(err, unix.EINVAL) {
		w.log.Warn("inotify_rm_watch failed", "wd", wd, "err", err)
	}
}

func (w *watcher) close() error {
	w.closeOnce.Do(func() {
		w.mu.Lock()
		w.closed = true
		w.files, w.dirs = nil, nil
		w.mu.Unlock()
		if err := w.file.Close(); err != nil {
			w.closeErr = fmt.Errorf("close inotify: %w", err)
		}
		<-w.done
	})
	return w.closeErr
}

func (w *watcher) run() {
	defer close(w.done)
	buf := make([]byte, 64*1024)
	for {
		n, err := w.file.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				w.log.Error("inotify read failed, cgroup watches stopped", "err", err)
			}
			return
		}
		for _, e := range w.collect(buf[:n]) {
			if !e.canceled.Load() {
				e.fn()
			}
		}
	}
}

// collect parses a batch of inotify events and returns the callbacks to run,
// each once, in order. Watches of removed cgroups are dropped here, under the
// lock, and their callbacks returned for a last call.
func (w *watcher) collect(buf []byte) []*watchEntry {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	var out []*watchEntry
	seen := make(map[*watchEntry]bool)
	addAll := func(list []*watchEntry) {
		for _, e := range list {
			if !seen[e] {
				seen[e] = true
				out = append(out, e)
			}
		}
	}
	for len(buf) >= unix.SizeofInotifyEvent {
		wd := int32(binary.NativeEndian.Uint32(buf[0:4]))
		mask := binary.NativeEndian.Uint32(buf[4:8])
		nameLen := binary.NativeEndian.Uint32(buf[12:16])
		next := unix.SizeofInotifyEvent + int(nameLen)
		if next > len(buf) {
			w.log.Error("short inotify event", "len", len(buf), "want", next)
			break
		}
		name := bytes.TrimRight(buf[unix.SizeofInotifyEvent:next], "\x00")
		buf = buf[next:]
		switch {
		case mask&unix.IN_Q_OVERFLOW != 0:
			w.log.Warn("inotify queue overflow, notifying every cgroup watch")
			for _, fw := range w.files {
				addAll(fw.entries)
			}
			// A creation may be among the lost events: every pending
			// watch looks again.
			var pending []*pendingWatch
			for _, dw := range w.dirs {
				for pw := range dw.waiters {
					pending = append(pending, pw)
				}
			}
			for _, pw := range pending {
				addAll(w.reawait(pw))
			}
		case mask&unix.IN_IGNORED != 0:
			if _, ok := w.files[wd]; ok {
				addAll(w.drop(wd))
			} else if dw := w.dirs[wd]; dw != nil {
				delete(w.dirs, wd) // the directory went (unmount): no removal events
				// Its waiters wait higher up, or their cgroup is there.
				for pw := range dw.waiters {
					addAll(w.reawait(pw))
				}
			}
		case mask&unix.IN_CREATE != 0:
			if dw := w.dirs[wd]; dw != nil {
				for pw := range dw.waiters {
					if next, _, _ := strings.Cut(strings.TrimPrefix(pw.dir, dw.path+"/"), "/"); next == string(name) {
						addAll(w.reawait(pw))
					}
				}
			}
		case mask&unix.IN_MODIFY != 0:
			if fw := w.files[wd]; fw != nil {
				addAll(fw.entries)
			}
		case mask&unix.IN_DELETE != 0:
			dw := w.dirs[wd]
			if dw == nil {
				break
			}
			cwd, ok := dw.children[string(name)]
			if !ok {
				break
			}
			fw := w.files[cwd]
			var st unix.Stat_t
			if fw == nil || (unix.Stat(filepath.Join(fw.dir, "cgroup.events"), &st) == nil && st.Ino == fw.ino) {
				break // not the watched cgroup: an earlier one of that name
			}
			addAll(w.drop(cwd))
			w.rmWatch(cwd)
		}
	}
	return out
}
