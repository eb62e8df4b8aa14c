package teardown

// The epilogues' output files, kept to a tail of bounded size.
//
// An epilogue writes its stdout and stderr to files under the state dir,
// not to pipes, so that it outlives a restart of the agent without dying of
// SIGPIPE (docs/DESIGN.md §3.2). Files give no back-pressure, though: an
// epilogue printing without end (300 MB in the issue) filled the state
// dir, which on a diskless node is RAM. So the agent keeps the end of
// each file only: on every change of a file (inotify IN_MODIFY) it punches
// out everything before its last OutputTail bytes (fallocate
// PUNCH_HOLE|KEEP_SIZE). A punched range takes no space and reads as
// zeros; the file keeps its length, so the epilogue's O_APPEND writes go
// on at its end, and no byte of the tail is ever lost (a copy and
// truncate, logrotate's copytruncate, loses what is written between the
// two). tmpfs, ext4, xfs and btrfs punch holes; on a file system that
// cannot, the output is not bounded and the agent says so once.
//
// What the file holds beyond the tail at any moment is what the epilogue
// wrote since the last trim: the space is bounded by OutputTail per stream
// plus the write rate times the agent's reaction time (an inotify wake-up,
// at least trimGap apart, and a punch). With `yes` (0.7-1.4 GB/s) on a
// loaded 2-core machine that was 6 to 38 MB at the worst moment of a run
// (TestEndlessEpilogueOutputIsBounded), where the files alone held 4 GB.
// A hard bound would need back-pressure, which only a pipe gives, and a
// pipe kills the epilogue when the agent restarts.

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DefaultOutputTail is how many bytes of each of an epilogue's streams
// are kept when Options.OutputTail is 0.
const DefaultOutputTail = 64 << 10

// trimGap is the shortest time between two trims of the files: the
// trimmer would otherwise wake once per write of an epilogue that writes
// without end (a core's worth of fstat calls). It is a bound on CPU, not
// a deadline, so it is real time.
const trimGap = time.Millisecond

// pageSize is the granularity of the punched ranges (a punched partial
// page would be zeroed, not freed).
const pageSize = 4096

// outputs watches the epilogues' output files and keeps each to its tail.
// Its methods are safe for concurrent use; run is its one goroutine.
type outputs struct {
	tail int64
	log  *slog.Logger

	ino  int // inotify instance
	wake int // eventfd that ends run

	mu     sync.Mutex
	byWD   map[int32]*outFile
	byPath map[string]*outFile
}

// outFile is one output file. mu is held across a punch and across a
// reader's read, so a reader never reads a range as it is punched.
type outFile struct {
	path string
	f    *os.File // written by nobody: opened for fallocate
	wd   int32

	mu        sync.Mutex
	kept      int64 // bytes before this offset are punched out
	unbounded bool  // the file system cannot punch holes
}

func newOutputs(tail int64, log *slog.Logger) (*outputs, error) {
	ino, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("epilogue output: inotify: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(ino)
		return nil, fmt.Errorf("epilogue output: eventfd: %w", err)
	}
	return &outputs{tail: tail, log: log, ino: ino, wake: wake,
		byWD: make(map[int32]*outFile), byPath: make(map[string]*outFile)}, nil
}

// add starts keeping the file at path to its tail (trimming it once now)
// and returns it; a file already added is returned as it is.
func (o *outputs) add(path string) (*outFile, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if f := o.byPath[path]; f != nil {
		return f, nil
	}
	fh, err := os.OpenFile(path, os.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("epilogue output: %w", err)
	}
	wd, err := unix.InotifyAddWatch(o.ino, path, unix.IN_MODIFY)
	if err != nil {
		fh.Close()
		return nil, fmt.Errorf("epilogue output: watch %s: %w", path, err)
	}
	f := &outFile{path: path, f: fh, wd: int32(wd)}
	o.byWD[f.wd] = f
	o.byPath[path] = f
	o.trim(f)
	return f, nil
}

// scan adds every output file under dir (output/<job>/<epilog>.std*), as
// a restarted agent finds them while their epilogues may still write.
func (o *outputs) scan(dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, "*", "*.std*"))
	for _, p := range files {
		if _, err := o.add(p); err != nil {
			o.log.Warn("cannot bound an epilogue's output", "path", p, "err", err)
		}
	}
}

// removeDir stops watching the files under dir (a released job's).
func (o *outputs) removeDir(dir string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for p, f := range o.byPath {
		if filepath.Dir(p) != dir {
			continue
		}
		unix.InotifyRmWatch(o.ino, uint32(f.wd))
		f.f.Close()
		delete(o.byPath, p)
		delete(o.byWD, f.wd)
	}
}

// run trims files as they change until close.
func (o *outputs) run() {
	buf := make([]byte, 64<<10)
	fds := []unix.PollFd{{Fd: int32(o.ino), Events: unix.POLLIN}, {Fd: int32(o.wake), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
			o.log.Error("epilogue output: poll failed; output is no longer bounded", "err", err)
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		n, err := unix.Read(o.ino, buf)
		if err != nil || n <= 0 {
			continue
		}
		changed := map[*outFile]bool{}
		o.mu.Lock()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			if f := o.byWD[ev.Wd]; f != nil {
				changed[f] = true
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
		for f := range changed {
			o.trim(f)
		}
		o.mu.Unlock()
		time.Sleep(trimGap)
	}
}

// close ends run (if it runs) and closes every file; run must have
// returned before the inotify instance is closed, so close waits for done.
func (o *outputs) close(done <-chan struct{}) {
	var one [8]byte
	one[0] = 1
	unix.Write(o.wake, one[:])
	if done != nil {
		<-done
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, f := range o.byPath {
		f.f.Close()
	}
	o.byPath, o.byWD = map[string]*outFile{}, map[int32]*outFile{}
	unix.Close(o.ino)
	unix.Close(o.wake)
}

// trim punches out f's bytes before its last o.tail ones. o.mu is held.
func (o *outputs) trim(f *outFile) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unbounded {
		return
	}
	fi, err := f.f.Stat()
	if err != nil {
		return
	}
	limit := (fi.Size() - o.tail) &^ (pageSize - 1)
	if limit <= f.kept {
		return
	}
	err = unix.Fallocate(int(f.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, f.kept, limit-f.kept)
	if err != nil {
		f.unbounded = true
		o.log.Warn("cannot keep an epilogue's output to its tail (the state dir's file system cannot punch holes): it grows as the epilogue writes",
			"path", f.path, "err", err)
		return
	}
	f.kept = limit
}

// readAt reads from f's file r at off, skipping what was punched out: it
// returns the offset it read from (off, or the start of the tail when the
// reader fell behind it) and what it read.
func (f *outFile) readAt(r *os.File, off int64, p []byte) (from int64, n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	from = max(off, f.kept)
	n, err = r.ReadAt(p, from)
	return from, n, err
}
