package agent_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/cgroup/cgrouptest"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/internal/testutil/benchenv"
)

// BenchmarkEpilogTrue measures `nodeagent epilog -- /bin/true` end to end
// (CLI start, socket request, cgroup creation, spawn into the cgroup, reap,
// stream, exit) against running /bin/true directly; the difference is the
// latency gracewatch adds to each epilogue. Every iteration is a new job;
// the agent runs at its default log level and the client is built as the
// package builds it (TestMain). The floor, measured in the same run and
// interleaved, is what a static Go hello world adds over /bin/true: the
// machine's own cost of starting a Go program, which the target is a
// ratio to (ratio = added by the epilog / added by the hello world). A
// second floor, also interleaved, is floorSrc: the hello world plus the
// work no supervised epilogue avoids (its cgroups, the spawn into them, a
// durable registration); ratio-to-floor is the epilog's added time over
// that one's. Figures are medians over the iterations (a slow outlier on a shared VM
// moves a mean, not a median).
func BenchmarkEpilogTrue(b *testing.B) {
	n := startNode(b, nodeOpts{grace: "60s", logLevel: "info"})
	hello := buildHello(b)
	floorBin := buildGo(b, "floor", floorSrc)
	floorRoot := cgrouptest.TempRoot(b)
	floorState := filepath.Join(n.dir, "floor")
	if err := os.Mkdir(floorState, 0o700); err != nil {
		b.Fatal(err)
	}
	run := func(argv ...string) time.Duration {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), "GRACEWATCH_SOCKET="+n.socket)
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %v: %s", argv, err, out)
		}
		return time.Since(start)
	}
	stateFile := filepath.Join(n.dir, "state", "state.json")
	var viaAgent, plain, hellos, floors []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		viaAgent = append(viaAgent, run(nodeagentBin, "epilog", "--job", "bench-"+strconv.Itoa(i), "--", "/bin/true"))
		plain = append(plain, run("/bin/true"))
		hellos = append(hellos, run(hello))
		floors = append(floors, run(floorBin, floorRoot, floorState, stateFile, "/bin/true"))
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	ep, tr, he, fl := benchenv.Median(viaAgent), benchenv.Median(plain), benchenv.Median(hellos), benchenv.Median(floors)
	b.ReportMetric(ms(fl-tr), "ms-added/floor")
	if fl > tr {
		b.ReportMetric(float64(ep-tr)/float64(fl-tr), "ratio-to-floor")
	}
	b.ReportMetric(ms(ep), "ms/epilog")
	b.ReportMetric(ms(tr), "ms/true")
	b.ReportMetric(ms(he), "ms/hello")
	b.ReportMetric(ms(ep-tr), "ms-added/epilog")
	b.ReportMetric(ms(he-tr), "ms-added/hello")
	if he > tr {
		b.ReportMetric(float64(ep-tr)/float64(he-tr), "ratio-to-hello")
	}
}

// buildHello builds a static Go hello world (as the client is built:
// CGO_ENABLED=0, -trimpath, -s -w) in a temporary directory.
func buildHello(b *testing.B) string {
	return buildGo(b, "hello", "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello\") }\n")
}

// floorSrc is the least that any design of a supervised epilogue does
// on this machine, in one static Go process and with no agent: start
// (the hello world's cost), make the job's cgroup and the epilogue's
// inside it, start the epilogue in it (CLONE_INTO_CGROUP), keep the
// registration durable while it runs (write a copy of the agent's state
// file, fsync, rename, fsync the directory, as the agent does), wait for
// it, remove the cgroups. Arguments: cgroup root, state dir, the state file
// to copy, the epilogue.
const floorSrc = `package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
)

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func main() {
	root, dir, state, prog := os.Args[1], os.Args[2], os.Args[3], os.Args[4]
	job := filepath.Join(root, "job-"+strconv.Itoa(os.Getpid()))
	cg := filepath.Join(job, "epilog")
	must(os.Mkdir(job, 0o755))
	must(os.Mkdir(cg, 0o755))
	fd, err := syscall.Open(cg, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	must(err)
	cmd := exec.Command(prog)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, UseCgroupFD: true, CgroupFD: fd}
	must(cmd.Start())
	data, _ := os.ReadFile(state)
	tmp := filepath.Join(dir, "state.json.tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	must(err)
	_, err = f.Write(data)
	must(err)
	must(f.Sync())
	must(f.Close())
	must(os.Rename(tmp, filepath.Join(dir, "state.json")))
	d, err := os.Open(dir)
	must(err)
	must(d.Sync())
	d.Close()
	must(cmd.Wait())
	must(os.Remove(cg))
	must(os.Remove(job))
}
`

// buildGo builds the Go program src as the client is built (static,
// CGO_ENABLED=0, -trimpath, -s -w) in a temporary directory.
func buildGo(b *testing.B, name, src string) string {
	dir := b.TempDir()
	file := filepath.Join(dir, name+".go")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		b.Fatal(err)
	}
	bin := filepath.Join(dir, name)
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, file)
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GO111MODULE=off")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build %s: %v\n%s", name, err, out)
	}
	return bin
}

// forcedGCPeriod is how often the Go runtime collects garbage in a process
// that allocates little (runtime.forcegcperiod): an idle agent's largest
// periodic cost, so a window of idleness holds a whole number of them.
const forcedGCPeriod = 2 * time.Minute

// watchdogUsec is the shipped unit's WatchdogSec (30 s,
// packaging/systemd/gracewatch-nodeagent.service): the agent pings every
// half of it through its main loop.
const watchdogUsec = "30000000"

// BenchmarkIdleAgent runs an agent as the shipped unit does (log level
// info, systemd's watchdog enabled: the agent pings NOTIFY_SOCKET every
// 15 s) with one registered job and nothing else to do, for IDLE_SECONDS
// (default 240) per iteration, and reports its CPU time per hour and its
// resident memory. The window is a whole number of the runtime's forced
// collections (2 min) and so of the watchdog's pings: the hour is that
// window repeated, not a stretch of it that may or may not hold a
// collection.
func BenchmarkIdleAgent(b *testing.B) {
	secs := benchenv.Int(b, "IDLE_SECONDS", 240)
	window := time.Duration(secs) * time.Second
	if window <= 0 || window%forcedGCPeriod != 0 {
		b.Fatalf("IDLE_SECONDS=%d: the window must be a whole number of the runtime's forced collections (%v)", secs, forcedGCPeriod)
	}
	notify, conn := testutil.ListenNotify(b)
	var pings atomic.Int64
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return // the test's cleanup closed it
			}
			if strings.Contains(string(buf[:n]), "WATCHDOG=1") {
				pings.Add(1)
			}
		}
	}()
	n := startNode(b, nodeOpts{logLevel: "info", env: []string{"NOTIFY_SOCKET=" + notify, "WATCHDOG_USEC=" + watchdogUsec}})
	n.jobStart("idle", time.Now().Add(time.Hour))
	pid := n.cmd.Process.Pid
	// The job start's work is over once the agent has closed its
	// connection (TestIdleAgentDoesNotPoll).
	if !testutil.Poll(30*time.Second, func() bool { return len(sockets(b, pid)) == 1 }) {
		b.Fatalf("the agent holds the sockets %q 30 s after the job's start, want its listener alone", sockets(b, pid))
	}
	b.ResetTimer()
	var cpu time.Duration
	var rss int64
	p0 := pings.Load()
	for i := 0; i < b.N; i++ {
		c0 := cpuTime(b, pid)
		time.Sleep(window) // not a wait: the measurement window
		cpu += cpuTime(b, pid) - c0
		rss = max(rss, rssKiB(b, pid))
	}
	b.StopTimer()
	got := pings.Load() - p0
	if got == 0 {
		b.Fatalf("the agent never pinged the watchdog in %v", time.Duration(b.N)*window)
	}
	perHour := cpu.Seconds() / float64(b.N) / window.Seconds() * 3600
	b.ReportMetric(perHour, "cpu-s/hour")
	b.ReportMetric(float64(rss)/1024, "MiB-rss")
	b.ReportMetric(float64(got)/float64(b.N), "watchdog-pings/window")
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
