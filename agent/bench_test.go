package agent_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkEpilogTrue measures `nodeagent epilog -- /bin/true` end to end
// (CLI start, socket request, cgroup creation, spawn into the cgroup, reap,
// stream, exit) against running /bin/true directly; the difference is the
// latency gracewatch adds to each epilogue. Every iteration is a new job.
func BenchmarkEpilogTrue(b *testing.B) {
	n := startNode(b, nodeOpts{grace: "60s"})
	direct := func() time.Duration {
		start := time.Now()
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	var viaAgent, plain time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		cmd := exec.Command(nodeagentBin, "epilog", "--job", "bench-"+strconv.Itoa(i), "--", "/bin/true")
		cmd.Env = append(os.Environ(), "GRACEWATCH_SOCKET="+n.socket)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("epilog: %v: %s", err, out)
		}
		viaAgent += time.Since(start)
		plain += direct()
	}
	b.StopTimer()
	b.ReportMetric(float64(viaAgent.Microseconds())/float64(b.N)/1000, "ms/epilog")
	b.ReportMetric(float64(plain.Microseconds())/float64(b.N)/1000, "ms/true")
	b.ReportMetric(float64((viaAgent-plain).Microseconds())/float64(b.N)/1000, "ms-added/epilog")
}

// BenchmarkIdleAgent runs an agent with one registered job and nothing to
// do for IDLE_SECONDS (default 20) per iteration and reports its CPU time
// extrapolated to an hour and its resident memory.
func BenchmarkIdleAgent(b *testing.B) {
	secs := 20
	if v, err := strconv.Atoi(os.Getenv("IDLE_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	n := startNode(b, nodeOpts{})
	n.jobStart("idle", time.Now().Add(time.Hour))
	pid := n.cmd.Process.Pid
	time.Sleep(500 * time.Millisecond)
	b.ResetTimer()
	var cpu time.Duration
	var rss int64
	for i := 0; i < b.N; i++ {
		c0 := cpuTime(b, pid)
		time.Sleep(time.Duration(secs) * time.Second)
		cpu += cpuTime(b, pid) - c0
		rss = max(rss, rssKiB(b, pid))
	}
	b.StopTimer()
	perHour := cpu.Seconds() / float64(b.N) / float64(secs) * 3600
	b.ReportMetric(perHour, "cpu-s/hour")
	b.ReportMetric(float64(rss)/1024, "MiB-rss")
}

// cpuTime is the CPU time of every thread of pid, in nanoseconds, from
// /proc/PID/task/*/schedstat (utime+stime in /proc/PID/stat counts 10 ms
// ticks: too coarse for an idle process).
func cpuTime(b *testing.B, pid int) time.Duration {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		b.Fatalf("no schedstat for pid %d: %v", pid, err)
	}
	var total int64
	for _, f := range tasks {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // a thread that exited
		}
		ns, _ := strconv.ParseInt(strings.Fields(string(data))[0], 10, 64)
		total += ns
	}
	return time.Duration(total)
}

func rssKiB(b *testing.B, pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			x, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return x
		}
	}
	return 0
}
