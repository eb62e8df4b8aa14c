// Package hangfs is a FUSE file system for tests whose reads never answer.
//
// Its root holds two files: "hang", whose reads are taken by the server and
// never answered (an INTERRUPT from the kernel is ignored too), and "ok",
// which reads "ok\n". A process reading "hang" sleeps in request_wait_answer;
// after SIGKILL it sits in D with SIGKILL pending, unkillable, until the
// connection ends.
//
// A FUSE server is never stopped by trusting SIGKILL: a thread of its own
// that waits on its own mount (go-fuse opens a file in the mount just after
// mounting, and a killed process cannot answer it) leaves the server in D
// for ever, holding the connection open. Server.Stop and the demo abort the
// connection through fusectl first (AbortConnection), then kill and reap
// the server. A server says ReadyLine on its standard output once its
// mount is fully set up; before that, even aborting is the only safe stop.
//
// The server runs as a process of its own, the test binary re-executed with
// EnvMount set, so that a test can end it. A test package that uses Start
// must call RunIfRequested first thing in its TestMain:
//
//	func TestMain(m *testing.M) {
//		hangfs.RunIfRequested()
//		os.Exit(m.Run())
//	}
package hangfs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// EnvMount, when set, makes RunIfRequested serve hangfs at its value.
const EnvMount = "GRACEWATCH_HANGFS_MOUNT"

// EnvSelfRead, set to 1 in a server's environment, makes it read its own
// "hang" file once it is ready (StartSelfReading; the demo's test sets it
// for the hangfs-serve of scripts/demo.sh).
const EnvSelfRead = "GRACEWATCH_HANGFS_SELF_READ"

// FsName is the mount's source, and "fuse."+Name its file system type, as
// shown in mountinfo.
const (
	FsName = "gracewatch-hangfs"
	Name   = "hangfs"
)

// Names of the files in the root.
const (
	HangFile = "hang"
	OKFile   = "ok"
)

// FusectlDir is where the fusectl file system is mounted, when it is.
const FusectlDir = "/sys/fs/fuse/connections"

// ReadyLine is what a server writes, on a line of its own, to its standard
// output once the mount is set up and no thread of its own touches it any
// more.
const ReadyLine = "ready"

// startTimeout bounds how long Start waits for the mount, and Stop for the
// server to exit.
const startTimeout = 10 * time.Second

// RunIfRequested serves hangfs and exits, without returning, when EnvMount is
// set; otherwise it returns at once. The server exits when it is killed or
// its connection is aborted.
func RunIfRequested() {
	mnt := os.Getenv(EnvMount)
	if mnt == "" {
		return
	}
	if err := serve(mnt); err != nil {
		fmt.Fprintf(os.Stderr, "hangfs: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func serve(mnt string) error {
	root := &rootNode{}
	srv, err := fs.Mount(mnt, root, &fs.Options{
		MountOptions: fuse.MountOptions{
			DirectMount:       true,
			DirectMountStrict: true, // as root: mount(2), never fusermount
			AllowOther:        true,
			FsName:            FsName,
			Name:              Name,
		},
	})
	if err != nil {
		return fmt.Errorf("mount at %s: %w", mnt, err)
	}
	// fs.Mount returned after go-fuse's own open of a file in the mount
	// (its poll probe) was answered: from now on only other processes wait
	// on the mount, and a SIGKILL of this one ends it.
	fmt.Fprintln(os.Stdout, ReadyLine)
	if os.Getenv(EnvSelfRead) == "1" {
		// A thread of the server waits on its own mount, as go-fuse's
		// probe does during fs.Mount: SIGKILL alone cannot end it.
		go func() {
			if f, err := os.Open(filepath.Join(mnt, HangFile)); err == nil {
				_, _ = f.Read(make([]byte, 1))
			}
		}()
	}
	srv.Wait()
	return nil
}

type rootNode struct{ fs.Inode }

var _ fs.NodeOnAdder = (*rootNode)(nil)

func (r *rootNode) OnAdd(ctx context.Context) {
	r.AddChild(HangFile, r.NewPersistentInode(ctx, &hangNode{}, fs.StableAttr{Mode: syscall.S_IFREG}), false)
	ok := &fs.MemRegularFile{Data: []byte("ok\n"), Attr: fuse.Attr{Mode: 0o444}}
	r.AddChild(OKFile, r.NewPersistentInode(ctx, ok, fs.StableAttr{Mode: syscall.S_IFREG}), false)
}

// hangNode is a file whose reads are never answered.
type hangNode struct{ fs.Inode }

var (
	_ fs.NodeOpener    = (*hangNode)(nil)
	_ fs.NodeGetattrer = (*hangNode)(nil)
	_ fs.NodeReader    = (*hangNode)(nil)
)

// never is never closed: a read of "hang" waits on it forever.
var never = make(chan struct{})

func (*hangNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	// Direct I/O sends the reader's read(2) straight to the server and has
	// it wait in request_wait_answer, not on a page-cache folio lock.
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

func (*hangNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o444
	out.Size = 1 << 20
	return 0
}

func (*hangNode) Read(ctx context.Context, f fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	// The kernel marked the request sent before our read of /dev/fuse
	// returned: from now on a SIGKILL leaves the reader in D. Tell Start.
	fmt.Fprintln(os.Stdout, hungReadLine)
	// Ignore ctx: the kernel's INTERRUPT after a signal must stay
	// unanswered, or the reader would not stay stuck.
	<-never
	return nil, syscall.EIO
}

// hungReadLine is what the server writes to its stdout for each read of
// HangFile it takes.
const hungReadLine = "hung-read"

// Server is a running hangfs server process and its mount.
type Server struct {
	mnt    string
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd.Wait returned
	stderr *testutil.SyncBuffer
	major  uint32
	minor  uint32

	ready chan struct{} // closed when the server said ReadyLine

	readsMu   sync.Mutex
	hungReads int
	readsCh   chan struct{} // closed and replaced on every hung read

	mu      sync.Mutex
	stopped bool
	stopErr error
}

// Start runs a hangfs server in a new process, mounted on a fresh directory,
// and waits (up to 10 s) until the server says it is ready (ReadyLine). It needs root and /dev/fuse (skipping the test outside CI when they
// are missing) and registers t.Cleanup to Stop the server.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, false)
}

// StartSelfReading is Start for a server that, once ready, reads its own
// "hang" file (a read it takes and never answers, as any other): a thread
// of the server process then waits on its own mount, and SIGKILL alone
// leaves the process in D for ever. The fixture's own tests use it to show
// that Stop does not depend on when the server is stopped.
func StartSelfReading(t testing.TB) *Server {
	t.Helper()
	return start(t, true)
}

func start(t testing.TB, selfRead bool) *Server {
	t.Helper()
	testutil.RequireRoot(t)
	_, err := os.Stat("/dev/fuse")
	testutil.Require(t, err == nil, "needs /dev/fuse")

	dir, err := os.MkdirTemp("", "gw-hangfs-")
	if err != nil {
		t.Fatalf("hangfs: %v", err)
	}
	if dir, err = filepath.EvalSymlinks(dir); err != nil {
		t.Fatalf("hangfs: %v", err)
	}
	s := &Server{mnt: dir, exited: make(chan struct{}), stderr: &testutil.SyncBuffer{Max: 64 << 10}, ready: make(chan struct{}), readsCh: make(chan struct{})}
	s.cmd = exec.Command(os.Args[0], "-test.run=^$")
	s.cmd.Env = append(os.Environ(), EnvMount+"="+dir)
	if selfRead {
		s.cmd.Env = append(s.cmd.Env, EnvSelfRead+"=1")
	}
	out, w, err := os.Pipe()
	if err != nil {
		os.Remove(dir)
		t.Fatalf("hangfs: %v", err)
	}
	s.cmd.Stdout = w
	s.cmd.Stderr = s.stderr
	// The server dies with the test binary rather than leave a live mount.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = s.cmd.Start()
	w.Close()
	if err != nil {
		out.Close()
		os.Remove(dir)
		t.Fatalf("hangfs: start server: %v", err)
	}
	go s.countHungReads(out)
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("hangfs: %v", err)
		}
	})

	select {
	case <-s.ready:
	case <-s.exited:
		t.Fatalf("hangfs: server exited before mounting (does TestMain call hangfs.RunIfRequested?): %s; output: %q",
			s.cmd.ProcessState, s.stderr.String())
	case <-time.After(startTimeout):
		t.Fatalf("hangfs: server not ready at %s after %v; server output: %q", dir, startTimeout, s.stderr.String())
	}
	m, ok, err := findMount(dir)
	if err != nil {
		t.Fatalf("hangfs: %v", err)
	}
	if !ok || !strings.HasPrefix(m.fstype, "fuse") {
		t.Fatalf("hangfs: server ready but no FUSE mount at %s", dir)
	}
	s.major, s.minor = m.major, m.minor
	return s
}

// countHungReads reads the server's stdout until it exits.
func (s *Server) countHungReads(out *os.File) {
	defer out.Close()
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if sc.Text() == ReadyLine {
			close(s.ready)
			continue
		}
		if sc.Text() != hungReadLine {
			continue
		}
		s.readsMu.Lock()
		s.hungReads++
		close(s.readsCh)
		s.readsCh = make(chan struct{})
		s.readsMu.Unlock()
	}
}

// HungReads returns how many reads of HangFile the server has taken (and
// will never answer).
func (s *Server) HungReads() int {
	s.readsMu.Lock()
	defer s.readsMu.Unlock()
	return s.hungReads
}

// WaitHungReads waits, at most 10 s, until the server has taken n reads of
// HangFile. A reader whose read was taken stays in D after SIGKILL; one
// whose read is still queued in the kernel dies of it.
func (s *Server) WaitHungReads(n int) error {
	deadline := time.After(startTimeout)
	for {
		s.readsMu.Lock()
		got, ch := s.hungReads, s.readsCh
		s.readsMu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ch:
		case <-s.exited:
			return fmt.Errorf("hangfs server exited after %d of %d hung reads", got, n)
		case <-deadline:
			return fmt.Errorf("hangfs server took %d of %d hung reads in %v", got, n, startTimeout)
		}
	}
}

// Mountpoint returns the directory hangfs is mounted on.
func (s *Server) Mountpoint() string { return s.mnt }

// Path returns the path of name (HangFile, OKFile) in the mount.
func (s *Server) Path(name string) string { return filepath.Join(s.mnt, name) }

// PID returns the server's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Device returns the mount's device major and minor; the minor is the FUSE
// connection number under /sys/fs/fuse/connections.
func (s *Server) Device() (major, minor uint32) { return s.major, s.minor }

// Stop aborts the FUSE connection through fusectl (readers waiting for an
// answer get an error, and so would a thread of the server waiting on its
// own mount), then kills the server by its pid with SIGKILL and reaps it,
// unmounts the directory with MNT_DETACH and removes it. It waits at most
// 10 s for the server to exit. It is idempotent and safe for concurrent
// use; later calls return the first call's error.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return s.stopErr
	}
	s.stopped = true
	var errs []error
	if err := abortConn(s.minor); err != nil {
		errs = append(errs, err)
	}
	if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		errs = append(errs, fmt.Errorf("kill server pid %d: %w", s.PID(), err))
	}
	select {
	case <-s.exited:
	case <-time.After(startTimeout):
		errs = append(errs, fmt.Errorf("server pid %d did not exit within %v of its connection's abort and SIGKILL", s.PID(), startTimeout))
	}
	if err := unix.Unmount(s.mnt, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		errs = append(errs, fmt.Errorf("unmount %s: %w", s.mnt, err))
	}
	// Remove, not RemoveAll: if the mount were still there, RemoveAll would
	// walk into it.
	if err := os.Remove(s.mnt); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("remove mountpoint: %w", err))
	}
	s.stopErr = errors.Join(errs...)
	return s.stopErr
}

// Abort aborts the FUSE connection (AbortConnection) and leaves the server
// running. Readers waiting for an answer get an error; the server then
// exits on its own (Stop reaps it).
func (s *Server) Abort() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return fmt.Errorf("abort hangfs connection: server stopped")
	}
	return abortConn(s.minor)
}

// AbortConnection aborts the FUSE connection of the mount at dir, found in
// /proc/self/mountinfo (dir itself is never touched: a stat of a mount
// whose server does not answer would hang): it writes 1 to
// <fusectl>/<minor>/abort. Every request in flight and every later one
// then fails, whatever the server does. Without a mount at dir it does
// nothing. fusectl is used where it is mounted (FusectlDir); else it is
// mounted in a private mount namespace of a child process (sh and mount),
// gone with it, so that nothing is left mounted whatever happens.
func AbortConnection(dir string) error {
	m, ok, err := findMount(dir)
	if err != nil {
		return err
	}
	if !ok || !strings.HasPrefix(m.fstype, "fuse") {
		return nil
	}
	return abortConn(m.minor)
}

// abortConn aborts FUSE connection minor (see AbortConnection). A
// connection that is gone (no folder for it in fusectl) is not an error.
func abortConn(minor uint32) error {
	name := strconv.FormatUint(uint64(minor), 10)
	if fusectlMounted() {
		err := writeAbort(FusectlDir, name)
		if err == nil || (errors.Is(err, os.ErrNotExist) && fusectlMounted()) {
			return nil // aborted, or ended already
		}
		// Unmounted meanwhile by someone else: mount our own below.
	}
	return abortConnPrivate(name)
}

// abortConnPrivate aborts FUSE connection name through a fusectl mounted
// in a mount namespace of a child process of its own (private, so nothing
// propagates out, and gone with the child). Not a thread of this process:
// Go may run a locked goroutine on the main thread, whose namespace is the
// one /proc/self/mountinfo shows, and would keep it.
func abortConnPrivate(name string) error {
	cmd := exec.Command("sh", "-c", `grep -q " $1 .* - fusectl " /proc/self/mountinfo ||
	mount -t fusectl fusectl "$1" || exit 3
f="$1/$2/abort"
[ -e "$f" ] || exit 0 # the connection has ended
echo 1 >"$f"`, "sh", FusectlDir, name)
	// os/exec makes every mount private in the new namespace (MS_REC|
	// MS_PRIVATE on /) before it runs sh.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("abort FUSE connection %s through a private fusectl: %w: %s", name, err, bytes.TrimSpace(out))
	}
	return nil
}

// fusectlMounted reports whether fusectl is mounted at FusectlDir.
func fusectlMounted() bool {
	m, ok, err := findMount(FusectlDir)
	return err == nil && ok && m.fstype == "fusectl"
}

// writeAbort writes 1 to dir/name/abort (fs.ErrNotExist: no such
// connection, or no fusectl at dir).
func writeAbort(dir, name string) error {
	if err := os.WriteFile(filepath.Join(dir, name, "abort"), []byte("1"), 0); err != nil {
		return fmt.Errorf("abort FUSE connection: %w", err)
	}
	return nil
}

type mountEntry struct {
	major, minor uint32
	fstype       string
	source       string
}

// findMount returns the topmost mount at dir from /proc/self/mountinfo. It
// reads mountinfo only and never touches dir.
func findMount(dir string) (mountEntry, bool, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return mountEntry{}, false, fmt.Errorf("read mountinfo: %w", err)
	}
	var found mountEntry
	ok := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || len(f) < sep+3 || unescape(f[4]) != dir {
			continue
		}
		maj, min, _ := strings.Cut(f[2], ":")
		a, err1 := strconv.ParseUint(maj, 10, 32)
		b, err2 := strconv.ParseUint(min, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		found = mountEntry{major: uint32(a), minor: uint32(b), fstype: f[sep+1], source: f[sep+2]}
		ok = true
	}
	return found, ok, sc.Err()
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
