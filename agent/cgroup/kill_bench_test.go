package cgroup_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/cgroup"
)

// BenchmarkKill1000 measures the escalation's last step on a cgroup of 1,000
// processes: from the call to Kill until the watcher reports populated 0,
// and, in alternate iterations of the same run, its floor: the kernel's own
// cgroup.kill written directly, until the same watcher reports populated 0
// (the target is a ratio to it: the kernel's time varies by machine and
// hour). Each iteration's setup (a shell forking 1,000 sleeps in a fresh
// cgroup) is outside the timer, and bounded by setupBound, not by the
// tests' bound: on a loaded 2-core VM the forks alone took more than 5 s in
// 2 of 5 runs, and a benchmark must measure a slow machine, not give up on
// it. Run it with an even -benchtime of at least 2x.
func BenchmarkKill1000(b *testing.B) {
	const procs = 1000
	const setupBound = 2 * time.Minute
	m := newManager(b, cgroup.Options{})
	var agent, floor []time.Duration
	var calls time.Duration
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		cg := create(b, m, fmt.Sprintf("bench-%d", i))
		sh := exec.Command("sh", "-c", fmt.Sprintf(
			`i=0; while [ $i -lt %d ]; do sleep 1000 & i=$((i+1)); done; echo ready; wait`, procs))
		afterStart, next := readyPipeWithin(b, sh, setupBound)
		p := startProc(b, m, sh, cg)
		afterStart()
		if s := next(); s != "ready" {
			b.Fatalf("shell said %q", s)
		}
		if pids, err := cgroup.Procs(cg); err != nil || len(pids) != procs+1 {
			b.Fatalf("cgroup has %d processes (%v), want %d", len(pids), err, procs+1)
		}
		ch, cancel := watchCalls(b, m, cg)

		kernel := i%2 == 1
		if _, err := os.Stat(filepath.Join(cg, "cgroup.kill")); err != nil {
			kernel = false // before Linux 5.14: no floor to measure
		}
		b.StartTimer()
		start := time.Now()
		if kernel {
			if err := os.WriteFile(filepath.Join(cg, "cgroup.kill"), []byte("1"), 0); err != nil {
				b.Fatal(err)
			}
		} else {
			if _, err := m.Kill(cg); err != nil {
				b.Fatal(err)
			}
			calls += time.Since(start)
		}
		for {
			if pop, _ := cgroup.Populated(cg); !pop {
				break
			}
			select {
			case <-ch:
			case <-time.After(setupBound):
				b.Fatalf("cgroup %s still populated %v after the kill", cg, setupBound)
			}
		}
		d := time.Since(start)
		b.StopTimer()

		if kernel {
			floor = append(floor, d)
		} else {
			agent = append(agent, d)
		}
		cancel()
		p.wait(b)
		if err := m.Remove(cg); err != nil {
			b.Fatal(err)
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	a := median(agent)
	b.ReportMetric(ms(a), "ms/kill")
	// The part spent in the Kill call itself (cgroup.kill and the pidfd pass).
	b.ReportMetric(ms(calls)/float64(len(agent)), "ms/kill-call")
	if len(floor) > 0 {
		f := median(floor)
		b.ReportMetric(ms(f), "ms/kernel-kill")
		if f > 0 {
			b.ReportMetric(float64(a)/float64(f), "ratio-to-kernel")
		}
	}
}

// median returns the middle of ds (sorted in place).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}
