package cgroup_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gracewatch/gracewatch/agent/cgroup"
	"github.com/gracewatch/gracewatch/internal/testutil"
)

// TestKillDaemon: a double-forked setsid daemon outlives the shell that
// started it (and that shell's reaping), keeps the cgroup populated, and Kill
// empties it.
func TestKillDaemon(t *testing.T) {
	m := newManager(t, cgroup.Options{})
	cg := create(t, m, "job-daemon")
	cmd := exec.Command("sh", "-c", `setsid sh -c 'sleep 1000 </dev/null >/dev/null 2>&1 & echo $!'`)
	afterStart, next := readyPipe(t, cmd)
	p := startProc(t, m, cmd, cg)
	afterStart()
	daemon, err := strconv.Atoi(next())
	if err != nil {
		t.Fatalf("daemon pid: %v", err)
	}
	if err := p.wait(t); err != nil {
		t.Fatalf("sh: %v", err)
	}
	// The epilogue is reaped; the daemon lives on in its own session.
	if pop, err := cgroup.Populated(cg); !pop || err != nil {
		t.Fatalf("Populated = %v, %v after the shell was reaped, want true", pop, err)
	}
	st := procStatus(t, daemon)
	if st["PPid"] == strconv.Itoa(p.pid) {
		t.Errorf("daemon %d still has the shell as parent", daemon)
	}
	if got := procCgroup(t, daemon); got != rel(m, cg) {
		t.Errorf("daemon %d in %s, want %s", daemon, got, rel(m, cg))
	}
	stat, _ := os.ReadFile("/proc/" + strconv.Itoa(daemon) + "/stat")
	if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); f[3] == strconv.Itoa(p.pid) {
		t.Errorf("daemon %d in the shell's session", daemon)
	}

	done, cancel := watchCalls(t, m, cg)
	defer cancel()
	n, err := m.Kill(cg)
	if err != nil || n != 1 {
		t.Errorf("Kill = %d, %v; want 1, nil", n, err)
	}
	d := waitPopulated(t, m, cg, false)
	t.Logf("populated 0 seen %v after Kill", d)
	select {
	case <-done:
	case <-timeAfterBound():
		t.Error("no Watch callback for populated 0")
	}
}

// zombieLeaderC is a process whose main thread exits (pthread_exit) while a
// second thread lives on. The thread prints "ready" once the main thread is a
// zombie.
const zombieLeaderC = `
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static pthread_t main_thread;

static void *worker(void *arg) {
	char path[64], buf[512];
	(void)arg;
	pthread_join(main_thread, NULL); /* returns once the kernel cleared its tid */
	snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)getpid());
	for (;;) { /* then the state turns Z within microseconds */
		FILE *f = fopen(path, "r");
		if (!f) return NULL;
		size_t n = fread(buf, 1, sizeof buf - 1, f);
		fclose(f);
		buf[n] = 0;
		char *p = strrchr(buf, ')');
		if (p && p[1] == ' ' && p[2] == 'Z') break;
		usleep(1000);
	}
	printf("ready\n");
	fflush(stdout);
	for (;;) pause();
}

int main(void) {
	pthread_t t;
	main_thread = pthread_self();
	if (pthread_create(&t, NULL, worker, NULL) != 0) return 1;
	pthread_exit(NULL);
}
`

// TestKillMainThreadZombie: cgroup.kill alone misses a process whose main
// thread has exited while another thread runs (seen on Linux 6.18); Kill
// must still empty the cgroup.
func TestKillMainThreadZombie(t *testing.T) {
	m := newManager(t, cgroup.Options{})
	gcc, err := exec.LookPath("gcc")
	testutil.Require(t, err == nil, "needs gcc")
	dir := t.TempDir()
	src := filepath.Join(dir, "zombie_leader.c")
	bin := filepath.Join(dir, "zombie_leader")
	if err := os.WriteFile(src, []byte(zombieLeaderC), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gcc, "-O2", "-pthread", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}

	cg := create(t, m, "job-zombie-leader")
	cmd := exec.Command(bin)
	afterStart, next := readyPipe(t, cmd)
	p := startProc(t, m, cmd, cg)
	afterStart()
	if s := next(); s != "ready" {
		t.Fatalf("helper said %q", s)
	}
	// Prove the state this test is about.
	st := procStatus(t, p.pid)
	if !strings.HasPrefix(st["State"], "Z") || st["Threads"] != "2" {
		t.Fatalf("pid %d: State %q, Threads %q; want a zombie main thread with 2 threads", p.pid, st["State"], st["Threads"])
	}
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(p.pid) + "/task")
	if len(tasks) != 2 {
		t.Fatalf("pid %d has %d tasks, want 2", p.pid, len(tasks))
	}
	if pids, _ := cgroup.Procs(cg); len(pids) != 1 || pids[0] != p.pid {
		t.Fatalf("cgroup.procs %v, want [%d]", pids, p.pid)
	}

	n, err := m.Kill(cg)
	if err != nil || n != 1 {
		t.Errorf("Kill = %d, %v; want 1, nil", n, err)
	}
	d := waitPopulated(t, m, cg, false)
	t.Logf("populated 0 seen %v after Kill", d)
	err = p.wait(t)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("helper ended with %v, want SIGKILL", err)
	}
}

// TestSignalSubtree: SIGTERM reaches every process of a nested subtree; one
// that ignores SIGTERM survives it.
func TestSignalSubtree(t *testing.T) {
	m := newManager(t, cgroup.Options{})
	top := create(t, m, "job-sig")
	a := create(t, m, "job-sig/a")
	c := create(t, m, "job-sig/b/c")
	d := create(t, m, "job-sig/d")

	pa := startProc(t, m, exec.Command("sleep", "1000"), a)
	pc := startProc(t, m, exec.Command("sleep", "1000"), c)
	trap := exec.Command("sh", "-c", `trap '' TERM; echo ready; exec sleep 1000`)
	afterStart, next := readyPipe(t, trap)
	pd := startProc(t, m, trap, d)
	afterStart()
	if s := next(); s != "ready" {
		t.Fatalf("trap shell said %q", s)
	}

	n, err := m.Signal(top, syscall.SIGTERM)
	if err != nil || n != 3 {
		t.Fatalf("Signal = %d, %v; want 3, nil", n, err)
	}
	for _, p := range []*proc{pa, pc} {
		err := p.wait(t)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
			t.Errorf("pid %d ended with %v, want SIGTERM", p.pid, err)
		}
	}
	// An ignored signal is discarded when sent: the survivor is decided.
	if pd.exited() {
		t.Fatalf("pid %d ignoring SIGTERM exited: %v", pd.pid, pd.err)
	}
	if st := procStatus(t, pd.pid); strings.HasPrefix(st["State"], "Z") {
		t.Fatalf("pid %d ignoring SIGTERM is a zombie", pd.pid)
	}
	if pop, _ := cgroup.Populated(top); !pop {
		t.Error("cgroup empty although one process ignores SIGTERM")
	}
	if n, err := m.Kill(top); err != nil || n != 1 {
		t.Errorf("Kill = %d, %v; want 1, nil", n, err)
	}
	waitPopulated(t, m, top, false)
}

// TestSignalChecksCgroup: the per-pid step signals only a process that is
// still in the cgroup (what makes Signal safe against pid reuse).
func TestSignalChecksCgroup(t *testing.T) {
	m := newManager(t, cgroup.Options{})
	a := create(t, m, "a")
	b := create(t, m, "b")
	p := startProc(t, m, exec.Command("sleep", "1000"), a)
	if ok, err := m.SignalPID(p.pid, b, syscall.SIGKILL); ok || err != nil {
		t.Fatalf("SignalPID(pid in a, b) = %v, %v; want false, nil", ok, err)
	}
	if ok, err := m.SignalPID(p.pid, m.Root(), 0); !ok || err != nil {
		t.Errorf("SignalPID(pid, ancestor of a, 0) = %v, %v; want true, nil", ok, err)
	}
	if p.exited() {
		t.Fatal("process killed through a cgroup it is not in")
	}
	if ok, err := m.SignalPID(p.pid, a, syscall.SIGKILL); !ok || err != nil {
		t.Fatalf("SignalPID(pid, a) = %v, %v; want true, nil", ok, err)
	}
	p.wait(t)
	if ok, err := m.SignalPID(p.pid, a, syscall.SIGKILL); ok || err != nil {
		t.Errorf("SignalPID(reaped pid) = %v, %v; want false, nil", ok, err)
	}
}

// TestForeign: a cgroup outside Root can be resolved, watched and signalled,
// but Kill, Remove and Start refuse it (and Root itself), naming the path.
func TestForeign(t *testing.T) {
	m := newManager(t, cgroup.Options{})
	other := newManager(t, cgroup.Options{}) // plays Slurm
	foreign := create(t, other, "job_42")
	fp := startProc(t, other, exec.Command("sleep", "1000"), foreign)

	if got, err := m.Resolve(strings.TrimPrefix(foreign, m.Mount()+"/")); err != nil || got != foreign {
		t.Errorf("Resolve = %q, %v", got, err)
	}
	_, err := m.Kill(foreign)
	wantNotOwned(t, "Kill", err, foreign)
	wantNotOwned(t, "Remove", m.Remove(foreign), foreign)
	cmd := exec.Command("sleep", "1000")
	wantNotOwned(t, "Start", m.Start(cmd, foreign), foreign)
	if cmd.Process != nil {
		t.Error("Start refused but started a process")
	}
	for _, p := range []string{m.Root(), m.Root() + "/", m.Root() + "/..", "job-1"} {
		_, err := m.Kill(p)
		wantNotOwned(t, "Kill", err, filepath.Clean(p))
		wantNotOwned(t, "Remove", m.Remove(p), filepath.Clean(p))
		wantNotOwned(t, "Start", m.Start(exec.Command("true"), p), filepath.Clean(p))
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Fatalf("foreign cgroup touched: %v", err)
	}
	if _, err := m.Signal(m.Mount(), 0); err == nil || !strings.Contains(err.Error(), m.Mount()) {
		t.Errorf("Signal(mount root) = %v, want a refusal naming it", err)
	}
	if _, err := m.Signal("/etc", 0); err == nil || !strings.Contains(err.Error(), "/etc") {
		t.Errorf("Signal(/etc) = %v, want a refusal naming it", err)
	}

	// Signals are the caller's policy: allowed on foreign cgroups.
	if n, err := m.Signal(foreign, syscall.SIGTERM); err != nil || n != 1 {
		t.Fatalf("Signal(foreign) = %d, %v; want 1, nil", n, err)
	}
	fp.wait(t)
	waitPopulated(t, m, foreign, false)
}

func TestRemove(t *testing.T) {
	m := newManager(t, cgroup.Options{})
	job := create(t, m, "job-rm")
	create(t, m, "job-rm/a/b")
	leaf := create(t, m, "job-rm/c")
	p := startProc(t, m, exec.Command("sleep", "1000"), leaf)

	err := m.Remove(job)
	if !errors.Is(err, syscall.EBUSY) || !strings.Contains(err.Error(), leaf) {
		t.Errorf("Remove(populated) = %v, want EBUSY naming %s", err, leaf)
	}
	if _, err := m.Kill(job); err != nil {
		t.Fatal(err)
	}
	p.wait(t)
	waitPopulated(t, m, job, false)
	if err := m.Remove(job); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if _, err := os.Stat(job); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("job cgroup still there: %v", err)
	}
	if err := m.Remove(job); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	if n, err := m.Kill(job); n != 0 || err != nil {
		t.Errorf("Kill(removed) = %d, %v; want 0, nil", n, err)
	}
}

// TestTempRootCleanup: the cleanup kills what a test left behind and removes
// the tree.
func TestTempRootCleanup(t *testing.T) {
	var root string
	t.Run("leaves processes", func(t *testing.T) {
		m := newManager(t, cgroup.Options{})
		root = m.Root()
		cg := create(t, m, "x/y")
		cmd := exec.Command("sh", "-c", `setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo ok`)
		afterStart, next := readyPipe(t, cmd)
		startProc(t, m, cmd, cg)
		afterStart()
		next()
	})
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("TempRoot %s not removed: %v", root, err)
	}
}
