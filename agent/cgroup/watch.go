package cgroup

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
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
// order. When the cgroup is removed (rmdir), fn is called one last time and
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
	dirs   map[int32]*dirWatch  // by wd of a watched cgroup's parent directory

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

// dirWatch is the watch of a parent directory: its watched children by name.
type dirWatch struct {
	children map[string]int32
}

type watchEntry struct {
	fn       func()
	canceled atomic.Bool // set by cancel; read by the watcher goroutine
	dropped  bool        // the watch ended (cgroup removed); guarded by mu
}

func newWatcher(log *slog.Logger) (*watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	// A nonblocking fd makes os.NewFile register it with the runtime poller,
	// so Read parks the goroutine and Close wakes it with os.ErrClosed.
	w := &watcher{
		log:   log,
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
	// The same inode gives the same wd: the entries are kept per wd.
	wd, err := unix.InotifyAddWatch(w.fd, file, unix.IN_MODIFY)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", file, err)
	}
	fw := w.files[int32(wd)]
	if fw == nil {
		fw, err = w.newFileWatch(int32(wd), dir, file)
		if err != nil {
			w.rmWatch(int32(wd))
			return nil, err
		}
	}
	e := &watchEntry{fn: fn}
	fw.entries = append(fw.entries, e)
	return func() { w.cancel(int32(wd), e) }, nil
}

// newFileWatch registers the file watch wd and the watch of its parent.
func (w *watcher) newFileWatch(wd int32, dir, file string) (*fileWatch, error) {
	var st unix.Stat_t
	if err := unix.Stat(file, &st); err != nil {
		return nil, fmt.Errorf("watch %s: %w", file, err)
	}
	parent := filepath.Dir(dir)
	pwd, err := unix.InotifyAddWatch(w.fd, parent, unix.IN_DELETE|unix.IN_ONLYDIR)
	if err != nil {
		return nil, fmt.Errorf("watch %s for removals: %w", parent, err)
	}
	dw := w.dirs[int32(pwd)]
	if dw == nil {
		dw = &dirWatch{children: make(map[string]int32)}
		w.dirs[int32(pwd)] = dw
	}
	// A stale wd under the same name (a removed cgroup whose IN_DELETE is
	// still queued) is replaced: the inode check in collect sorts them out.
	dw.children[filepath.Base(dir)] = wd
	fw := &fileWatch{dir: dir, ino: st.Ino, parent: int32(pwd)}
	w.files[wd] = fw
	return fw, nil
}

func (w *watcher) cancel(wd int32, e *watchEntry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e.canceled.Swap(true) || w.closed || e.dropped {
		return
	}
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
		if len(dw.children) == 0 {
			delete(w.dirs, fw.parent)
			w.rmWatch(fw.parent)
		}
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
		case mask&unix.IN_IGNORED != 0:
			if _, ok := w.files[wd]; ok {
				addAll(w.drop(wd))
			} else {
				delete(w.dirs, wd) // the parent went (unmount): no removal events
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
