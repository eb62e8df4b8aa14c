package diagnose

import (
	"context"
	"encoding/json"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/procfs"
	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// copyTree copies the fixture tree src to dst, keeping symbolic links as
// links (fd/*, cwd, exe are links whose targets must never be followed).
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		default:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(to, data, 0o644)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

// fixtureSnapshotter returns a Snapshotter over a copy of testdata/proc in
// which 9610/cmdline is a FIFO without a writer: its read blocks, as the
// cmdline of a process whose mmap lock is held does.
func fixtureSnapshotter(t *testing.T) (*Snapshotter, *procfs.Reader, *clock.Fake) {
	t.Helper()
	root := t.TempDir()
	copyTree(t, "testdata/proc", root)
	fifo := filepath.Join(root, "9610/cmdline")
	if err := os.Remove(fifo); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	hung := filepath.Join(root, "hung_task_detect_count")
	if err := os.WriteFile(hung, []byte("2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reader := procfs.New(procfs.Options{Root: root, Timeout: 100 * time.Millisecond, MaxBlocked: 4})
	t.Cleanup(func() {
		testutil.Poll(30*time.Second, func() bool {
			if reader.Blocked() == 0 {
				return true
			}
			if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
			return false
		})
		if n := reader.Blocked(); n > 0 {
			t.Errorf("%d reads still blocked", n)
		}
	})
	clk := clock.NewFake(time.Date(2026, 12, 2, 13, 30, 0, 0, time.UTC))
	s := NewSnapshotter(Options{
		Proc:           reader,
		SampleInterval: time.Millisecond,
		Clock:          clk,
		Node:           "node17",
		KmsgPath:       "testdata/kmsg",
		HungTaskPath:   hung,
		Host:           fixtureHost,
	})
	if err := os.WriteFile(hung, []byte("5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return s, reader, clk
}

// fixtureHost stands for the agent's gopsutil reader (internal/hostinfo,
// tested on its own and by the kernel tests): fixed facts keep the golden
// report stable.
func fixtureHost(context.Context) HostFacts {
	return HostFacts{Load1: 3.5, Load5: 2.25, Load15: 1, MemTotalBytes: 24 << 30, MemAvailableBytes: 20 << 30,
		UptimeSeconds: 86400, StateDir: "/var/lib/gracewatch", StateDirFreeBytes: 10 << 30, StateDirSizeBytes: 100 << 30}
}

func fixtureRequest(clk *clock.Fake) Request {
	now := clk.Now()
	term, kill := now.Add(-40*time.Second), now.Add(-30*time.Second)
	return Request{
		Job:   "1234",
		Grace: 2 * time.Minute,
		Stage: StageAfterEscalation,
		Timeline: Timeline{
			TeardownStart: now.Add(-3 * time.Minute),
			Deadline:      now.Add(-time.Minute),
			Term:          &term,
			Kill:          &kill,
		},
		Cgroups: []CgroupRef{{Path: "testdata/cgroup/job-1234", Owned: true}},
		PIDs:    []int{9509, 9507},
		DSince:  map[int]time.Time{9507: now.Add(-95 * time.Second)},
	}
}

func TestSnapshotFixture(t *testing.T) {
	s, reader, clk := fixtureSnapshotter(t)
	r := s.Snapshot(context.Background(), fixtureRequest(clk))

	classes := map[int]Class{}
	var order []int
	for _, p := range r.Processes {
		classes[p.PID] = p.Class
		order = append(order, p.PID)
	}
	want := map[int]Class{
		9507: Unkillable, 9610: Unkillable, 9600: ExitHang, 9620: KillableD,
		9508: Missed, 9630: Missed, 9640: Dying, 9509: Zombie,
	}
	for pid, c := range want {
		if classes[pid] != c {
			t.Errorf("pid %d: class %q, want %q", pid, classes[pid], c)
		}
	}
	if _, ok := classes[9999]; ok || len(classes) != len(want) {
		t.Errorf("processes %v: want exactly %v (9999 is listed but gone)", order, want)
	}
	if want := []int{9507, 9610, 9600, 9620, 9508, 9630, 9640, 9509}; !slices.Equal(order, want) {
		t.Errorf("order %v, want worst first %v", order, want)
	}

	p := find(t, r, 9610)
	if !slices.Contains(p.Errors, "cmdline unreadable: blocked") || p.Cmdline != nil {
		t.Errorf("pid 9610: errors %q cmdline %q, want the blocked cmdline reported", p.Errors, p.Cmdline)
	}
	if p.Exe != "/usr/bin/dd" || len(p.Threads) != 1 || !p.Threads[0].KillPending {
		t.Errorf("pid 9610: the snapshot did not go on after the blocked read: %+v", p)
	}
	if reader.Blocked() != 1 {
		t.Errorf("Blocked() = %d, want 1", reader.Blocked())
	}
	if f := fileOf(p, "3"); f.FSType != "nfs4" || f.Source != "fileserver:/export/home" || f.Mountpoint != "/home" {
		t.Errorf("pid 9610 fd 3 = %+v, want nfs4 /home", f)
	}
	cat := find(t, r, 9507)
	if f := fileOf(cat, "3"); f.FSType != "fuse.hangfs" || f.Device != "0:40" {
		t.Errorf("pid 9507 fd 3 = %+v", f)
	}
	if cat.SecondsInD != 95 || cat.Wchan != "request_wait_answer" || cat.Cgroup != "testdata/cgroup/job-1234" {
		t.Errorf("pid 9507 = %+v", cat)
	}
	mpirun := find(t, r, 9630)
	if mpirun.State != "S" || mpirun.Wchan != "futex_wait_queue" || mpirun.Threads[0].Class != Missed {
		t.Errorf("pid 9630 is summarised by %s in %s, want its live thread", mpirun.State, mpirun.Wchan)
	}
	if r.NodeContext.HungTaskDelta != 3 {
		t.Errorf("hung task delta %d, want 3", r.NodeContext.HungTaskDelta)
	}
	if r.Outcome != OutcomeHung {
		t.Errorf("outcome %q", r.Outcome)
	}

	got, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Golden(t, "testdata/report.golden.json", append(got, '\n'), *update)
}

func find(t *testing.T, r *Report, pid int) Process {
	t.Helper()
	for _, p := range r.Processes {
		if p.PID == pid {
			return p
		}
	}
	t.Fatalf("pid %d not in report", pid)
	return Process{}
}

func fileOf(p Process, fd string) File {
	for _, f := range p.Files {
		if f.FD == fd {
			return f
		}
	}
	return File{}
}

func TestSnapshotEmpty(t *testing.T) {
	reader := procfs.New(procfs.Options{Root: "testdata/proc"})
	clk := clock.NewFake(time.Date(2026, 12, 2, 13, 30, 0, 0, time.UTC))
	s := NewSnapshotter(Options{Proc: reader, Clock: clk, KmsgPath: "testdata/kmsg", HungTaskPath: "/nonexistent"})
	if got := reader.Stats().Reads; got != 0 {
		t.Errorf("making a Snapshotter read %d /proc files", got)
	}
	kill := clk.Now().Add(-time.Second)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.events"), []byte("populated 0\nfrozen 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := s.Snapshot(context.Background(), Request{
		Job: "7", Grace: 5 * time.Second, Stage: StageAfterEscalation,
		Timeline: Timeline{Kill: &kill}, Cgroups: []CgroupRef{{Path: dir, Owned: true}},
	})
	if took := time.Since(start); took > DefaultSampleInterval/2 {
		t.Errorf("an empty snapshot waited %v for a second sample", took)
	}
	if len(r.Processes) != 0 || r.Outcome != OutcomeKilled {
		t.Errorf("processes %d outcome %q", len(r.Processes), r.Outcome)
	}
	if r.Summary != "job 7 teardown exceeded grace 5s: all processes killed" {
		t.Errorf("summary %q", r.Summary)
	}
	if r.NodeContext.HungTaskDelta != -1 {
		t.Errorf("hung task delta without the file = %d, want -1", r.NodeContext.HungTaskDelta)
	}
	if len(r.NodeContext.KernelLines) != 2 || r.NodeContext.KernelLines[0] != "[123.456789] INFO: task dd:9610 blocked for more than 122 seconds." {
		t.Errorf("kernel lines %q", r.NodeContext.KernelLines)
	}
	if r.Cgroups[0].Events["populated"] != "0" {
		t.Errorf("cgroup info %+v", r.Cgroups[0])
	}
}

func TestSnapshotCancelled(t *testing.T) {
	s, _, clk := fixtureSnapshotter(t)
	s.interval = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	r := s.Snapshot(ctx, fixtureRequest(clk))
	if time.Since(start) > 5*time.Second {
		t.Errorf("a cancelled snapshot took %v", time.Since(start))
	}
	if len(r.Errors) == 0 || r.Summary == "" {
		t.Errorf("a cancelled snapshot should still return a report saying so: %+v", r.Errors)
	}
}

func TestSnapshotSingleSample(t *testing.T) {
	s, _, clk := fixtureSnapshotter(t)
	s.interval = time.Hour
	req := fixtureRequest(clk)
	req.SingleSample = true
	req.Stage = StageBeforeSignal
	req.Timeline.Term, req.Timeline.Kill = nil, nil
	start := time.Now()
	r := s.Snapshot(context.Background(), req)
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("a single-sample snapshot took %v", took)
	}
	if r.Samples != 1 || len(r.Processes) != 8 || r.Outcome != OutcomePending {
		t.Errorf("samples %d, %d processes, outcome %q", r.Samples, len(r.Processes), r.Outcome)
	}
	if th := find(t, r, 9507).Threads[0]; th.Scheduled || th.Class != Unkillable {
		t.Errorf("thread %+v", th)
	}
}
