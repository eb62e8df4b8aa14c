package procfs

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/internal/testutil/hangfs"
)

func TestMain(m *testing.M) {
	hangfs.RunIfRequested()
	goleak.VerifyTestMain(m)
}

func TestReaderReads(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "42/fd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "42/cmdline"), []byte("cat\x00x\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/scratch/never/stat/me", filepath.Join(root, "42/fd/3")); err != nil {
		t.Fatal(err)
	}
	r := New(Options{Root: root, MaxBytes: 3})
	if r.Stats().Reads != 0 {
		t.Fatalf("a new reader has read: %+v", r.Stats())
	}
	ctx := context.Background()

	data, err := r.ReadFile(ctx, "42/cmdline")
	if err != nil || string(data) != "cat" {
		t.Errorf("ReadFile = %q, %v; want the first MaxBytes (3), \"cat\"", data, err)
	}
	target, err := r.Readlink(ctx, "42/fd/3")
	if err != nil || target != "/scratch/never/stat/me" {
		t.Errorf("Readlink = %q, %v", target, err)
	}
	names, err := r.ReadDirNames(ctx, "42")
	slices.Sort(names)
	if err != nil || !slices.Equal(names, []string{"cmdline", "fd"}) {
		t.Errorf("ReadDirNames = %q, %v", names, err)
	}
	if _, err := r.ReadFile(ctx, "43/stat"); !IsGone(err) {
		t.Errorf("missing file: err %v, want IsGone", err)
	}
	if got := r.Stats(); got.Reads != 4 || got.Timeouts != 0 || got.Blocked != 0 {
		t.Errorf("stats = %+v, want 4 reads", got)
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := r.ReadFile(cancelled, "42/cmdline"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled ctx: err %v", err)
	}
	if got := r.Stats().Reads; got != 4 {
		t.Errorf("a read with a cancelled ctx was started: %d reads", got)
	}
}

// TestReaderBoundsBlockedReads blocks reads on a FIFO without a writer
// (open(2) waits for one), the stand-in of a /proc file of a hung process.
func TestReaderBoundsBlockedReads(t *testing.T) {
	root := t.TempDir()
	fifo := filepath.Join(root, "cmdline")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	const timeout = 100 * time.Millisecond
	r := New(Options{Root: root, Timeout: timeout, MaxBlocked: 2})
	ctx := context.Background()
	// Whatever happens, release the blocked reads so no goroutine leaks.
	t.Cleanup(func() { releaseFIFO(t, fifo, r) })

	for i := 1; i <= 2; i++ {
		start := time.Now()
		_, err := r.ReadFile(ctx, "cmdline")
		if !errors.Is(err, ErrBlocked) {
			t.Fatalf("read %d: err %v, want ErrBlocked", i, err)
		}
		if took := time.Since(start); took < timeout || took > timeout+2*time.Second {
			t.Errorf("read %d returned after %v, want about %v", i, took, timeout)
		}
		if got := Unreadable("cmdline", err); got != "cmdline unreadable: blocked" {
			t.Errorf("Unreadable = %q", got)
		}
		if got := r.Blocked(); got != i {
			t.Errorf("after %d blocked reads Blocked() = %d", i, got)
		}
	}

	// At the bound, even a read that would not block is refused at once.
	if err := os.WriteFile(filepath.Join(root, "stat"), []byte("1 (x) S"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := r.Stats()
	_, err := r.ReadFile(ctx, "stat")
	if !errors.Is(err, ErrTooManyBlocked) {
		t.Fatalf("at MaxBlocked: err %v, want ErrTooManyBlocked", err)
	}
	if _, err := r.Readlink(ctx, "x"); !errors.Is(err, ErrTooManyBlocked) {
		t.Errorf("Readlink at MaxBlocked: err %v", err)
	}
	after := r.Stats()
	if after.Reads != before.Reads || after.Refused != before.Refused+2 || after.Timeouts != 2 {
		t.Errorf("stats %+v -> %+v, want 2 refused and no read started", before, after)
	}

	releaseFIFO(t, fifo, r)
	if data, err := r.ReadFile(ctx, "stat"); err != nil || string(data) != "1 (x) S" {
		t.Errorf("after release: %q, %v", data, err)
	}
}

// releaseFIFO opens the FIFO for writing and closes it, so that the readers
// blocked in open(2) get EOF, and waits until Blocked is 0.
func releaseFIFO(t *testing.T, fifo string, r *Reader) {
	t.Helper()
	if !testutil.Poll(30*time.Second, func() bool {
		if r.Blocked() == 0 {
			return true
		}
		// O_NONBLOCK: fails with ENXIO, rather than waiting, when no
		// reader is left.
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		return false
	}) {
		t.Fatalf("Blocked() = %d 30s after release", r.Blocked())
	}
}

func TestReaderContextAbandonsRead(t *testing.T) {
	root := t.TempDir()
	fifo := filepath.Join(root, "environ")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	r := New(Options{Root: root, Timeout: time.Hour})
	t.Cleanup(func() { releaseFIFO(t, fifo, r) })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := r.ReadFile(ctx, "environ")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the context's", err)
	}
	var pe *fs.PathError
	if !errors.As(err, &pe) || pe.Path != fifo {
		t.Errorf("err %v does not name the path", err)
	}
	if r.Blocked() != 1 || r.Stats().Timeouts != 0 {
		t.Errorf("stats %+v, want 1 outstanding and no timeout", r.Stats())
	}
}

// TestReaderBlockedOnFUSE blocks a read on a real hung FUSE file, and shows
// that the outstanding read ends once the server is gone.
func TestReaderBlockedOnFUSE(t *testing.T) {
	srv := hangfs.Start(t)
	r := New(Options{Root: srv.Mountpoint(), Timeout: 200 * time.Millisecond, MaxBlocked: 1})
	ctx := context.Background()
	if data, err := r.ReadFile(ctx, hangfs.OKFile); err != nil || string(data) != "ok\n" {
		t.Fatalf("read ok = %q, %v", data, err)
	}
	if _, err := r.ReadFile(ctx, hangfs.HangFile); !errors.Is(err, ErrBlocked) {
		t.Fatalf("read hang: err %v, want ErrBlocked", err)
	}
	if r.Blocked() != 1 {
		t.Fatalf("Blocked() = %d, want 1", r.Blocked())
	}
	if _, err := r.ReadFile(ctx, hangfs.OKFile); !errors.Is(err, ErrTooManyBlocked) {
		t.Fatalf("read at the bound: err %v, want ErrTooManyBlocked", err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if !testutil.Poll(30*time.Second, func() bool { return r.Blocked() == 0 }) {
		t.Fatalf("Blocked() = %d 30s after the server stopped", r.Blocked())
	}
}
