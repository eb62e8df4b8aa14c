package diagnose

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/procfs"
	"github.com/gracewatch/gracewatch/internal/clock"
)

// TestSnapshotOfAHugeTreeIsBounded: a job of 3,000 processes (a /proc
// tree of their stat and status files) gives a report of MaxProcesses processes, the
// worst first (D, exiting, main thread gone with threads left; then the
// sleeping; zombies last), and counts by state of the others.
func TestSnapshotOfAHugeTreeIsBounded(t *testing.T) {
	const n = 3000
	root := t.TempDir()
	stat := func(pid int, state string, flags uint64, threads int) string {
		return fmt.Sprintf("%d (p%d) %s 1 1 1 0 -1 %d 78 0 0 0 3 41 0 0 20 0 %d 0 80088 2990080 397 18446744073709551615 0 0 0 0 0 0 0 0 0 1 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
			pid, pid, state, flags, threads)
	}
	var pids []int
	want := map[int]bool{} // the ones that must be described
	for i := range n {
		pid := 1000 + i
		state, flags, threads := "S", uint64(0), 1
		switch {
		case i%1000 == 7:
			state, want[pid] = "D", true
		case i%1000 == 8:
			state, flags, want[pid] = "R", uint64(procfs.PFExiting), true
		case i%1000 == 9:
			state, threads, want[pid] = "Z", 3, true
		case i%2 == 0:
			state = "Z"
		}
		dir := filepath.Join(root, fmt.Sprint(pid))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		status := fmt.Sprintf("Name:\tp%d\nState:\t%s (x)\nPid:\t%d\nPPid:\t1\nUid:\t0\t0\t0\t0\nThreads:\t%d\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\nSigBlk:\t0000000000000000\n",
			pid, state, pid, threads)
		task := filepath.Join(dir, "task", fmt.Sprint(pid))
		if err := os.MkdirAll(task, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{dir, task} {
			if err := os.WriteFile(filepath.Join(d, "stat"), []byte(stat(pid, state, flags, threads)), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d, "status"), []byte(status), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		pids = append(pids, pid)
	}
	if err := os.WriteFile(filepath.Join(root, "stat"), []byte("btime 1700000000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reader := procfs.New(procfs.Options{Root: root, Timeout: time.Second, MaxBlocked: 4})
	s := NewSnapshotter(Options{Proc: reader, Clock: clock.NewFake(time.Unix(1700000000, 0)), KmsgPath: "/nonexistent", HungTaskPath: "/nonexistent"})
	r := s.Snapshot(context.Background(), Request{Job: "big", Stage: StageBeforeSignal, SingleSample: true, PIDs: pids})
	if len(r.Processes) != MaxProcesses {
		t.Fatalf("%d processes described, want %d", len(r.Processes), MaxProcesses)
	}
	got := map[int]bool{}
	for _, p := range r.Processes {
		got[p.PID] = true
	}
	for pid := range want {
		if !got[pid] {
			t.Errorf("pid %d (D, exiting or main thread gone) left out", pid)
		}
	}
	for _, p := range r.Processes {
		if !want[p.PID] && p.State == "Z" {
			t.Errorf("zombie %d described before sleeping processes", p.PID)
		}
	}
	om := r.Omitted
	if om == nil || om.Processes != n-MaxProcesses || om.ByState["Z"] != n/2-n/1000 || om.ByState["S"] != n-MaxProcesses-om.ByState["Z"] {
		t.Fatalf("omitted %+v, want %d: %d Z and the rest S", om, n-MaxProcesses, n/2-n/1000)
	}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 256<<10 {
		t.Fatalf("report of %d bytes", len(data))
	}
	t.Logf("3,000 processes: report of %d bytes, %d described, summary %q", len(data), len(r.Processes), r.Summary)
}
