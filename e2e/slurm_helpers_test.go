package e2e

// Helpers of the Slurm tests (slurm_test.go): a one-node Slurm on loopback
// (munged, slurmctld, slurmd as child processes, all state in a temporary
// folder, after /work/shared/notes/slurm-on-one-machine.md), its client
// commands, and Slurm's view of the node and its jobs.
//
// gracewatch's wiring into the site (its Epilog= and actuators) is in
// slurm_wiring_helpers_test.go, the FUSE file system that makes the real
// epilogue hang in hangfs_helpers_test.go, and what the Slurm and Flux
// tests share in sched_helpers_test.go.

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/gracewatch/gracewatch/agent/cgroup/cgrouptest"
	"github.com/gracewatch/gracewatch/internal/testutil"
)

// slurmPrograms are the programs the Slurm tests run, from Debian's
// slurmctld, slurmd, slurm-client and munge packages.
var slurmPrograms = []string{"munged", "slurmctld", "slurmd", "scontrol", "sinfo", "sbatch", "squeue", "scancel"}

// requireSlurm skips the test (fails it in CI) without root, /dev/fuse, the
// munge user or one of slurmPrograms.
func requireSlurm(t testing.TB) {
	t.Helper()
	testutil.RequireRoot(t)
	const install = "apt-get install slurmctld slurmd slurm-client munge"
	for _, p := range slurmPrograms {
		_, err := lookSlurm(p)
		testutil.Require(t, err == nil, fmt.Sprintf("needs %s (%s)", p, install))
	}
	_, err := user.Lookup("munge")
	testutil.Require(t, err == nil, "needs the munge user ("+install+")")
	_, err = os.Stat("/dev/fuse")
	testutil.Require(t, err == nil, "needs /dev/fuse (the hung epilogue reads a FUSE file)")
}

// lookSlurm finds a program in PATH or in /usr/sbin (munged, slurmctld and
// slurmd live there, which a non-login PATH may lack).
func lookSlurm(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/usr/bin"} {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

// shortHostname is `hostname -s`: Slurm's NodeName for this host, and so the
// agent's node_name, which the actuators pass to scontrol as {node}.
func shortHostname(t testing.TB) string {
	t.Helper()
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	h, _, _ = strings.Cut(h, ".")
	return h
}

// daemon is a long-running child process (munged, slurmctld, slurmd), ended
// by its pid.
type daemon struct {
	name string
	cmd  *exec.Cmd
	logs *testutil.SyncBuffer
	done chan struct{}
}

func startDaemon(t testing.TB, name string, cred *syscall.Credential, argv ...string) *daemon {
	t.Helper()
	d := &daemon{name: name, logs: &testutil.SyncBuffer{}, done: make(chan struct{})}
	d.cmd = exec.Command(argv[0], argv[1:]...)
	d.cmd.Stdout, d.cmd.Stderr = d.logs, d.logs
	// Ended with the test binary rather than left running if it dies.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGTERM}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { d.cmd.Wait(); close(d.done) }()
	return d
}

func (d *daemon) exited() bool { return testutil.Closed(d.done) }

// stop sends SIGTERM, then SIGKILL after 10 s, and reaps the process.
func (d *daemon) stop() error {
	if d.exited() {
		return nil
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		return nil
	case <-time.After(10 * time.Second):
		d.cmd.Process.Kill()
		<-d.done
		return fmt.Errorf("%s (pid %d) ignored SIGTERM for 10 s: killed", d.name, d.cmd.Process.Pid)
	}
}

// slurmConfig is what changes between the tests' slurm.conf files.
type slurmConfig struct {
	Epilog          string // absolute path
	Prolog          string // absolute path; "": none
	PrologSlurmctld string // absolute path; "": none
	// Cgroup runs the job's tasks in cgroups: proctrack/cgroup and
	// task/cgroup with cgroup.conf CgroupPlugin=cgroup/v1 (this host is
	// hybrid: Slurm 22.05's cgroup/v2 refuses it), as a RHEL 8 site.
	Cgroup                bool
	KillWait              int // seconds; 0: 10
	UnkillableStepTimeout int // seconds; 0: 30
	PrologEpilogTimeout   int // seconds; 0: unset (Slurm waits for the epilogue forever)
	BackfillInterval      int // seconds; 0: Slurm's default (30)
}

// slurmSite is a one-node Slurm on loopback: its node is this host.
type slurmSite struct {
	t        testing.TB
	dir      string // every file of the site; mode 0755, munged must reach its files
	host     string
	conf     string
	ctldPort int
	dPort    int
	env      []string
	daemons  []*daemon // in start order
	// netns, if set, is the network namespace the client commands run in
	// (slurmctld's, in slurm_nodes_helpers_test.go).
	netns string
}

// newSlurmSite prepares the folder, munge key and ports of a site; start
// runs it. The folder is removed when the test ends.
func newSlurmSite(t testing.TB) *slurmSite {
	t.Helper()
	dir := siteDir(t, "gw-slurm-")
	s := &slurmSite{t: t, dir: dir, host: shortHostname(t), conf: filepath.Join(dir, "slurm.conf")}
	for _, sub := range []string{"munge", "munge-run", "log", "spool/ctld", "spool/d", "run"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	uid, gid := mungeIDs(t)
	key := make([]byte, 1024)
	rand.Read(key)
	keyFile := s.path("munge/munge.key")
	if err := os.WriteFile(keyFile, key, 0o400); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"munge", "munge-run", "munge/munge.key"} {
		if err := os.Chown(s.path(p), uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(s.path("munge"), 0o700); err != nil {
		t.Fatal(err)
	}
	s.ctldPort, s.dPort = slurmPort(t, 16817), slurmPort(t, 16818)
	s.env = append(os.Environ(), "SLURM_CONF="+s.conf)
	return s
}

func mungeIDs(t testing.TB) (int, int) {
	t.Helper()
	u, err := user.Lookup("munge")
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return uid, gid
}

// slurmPort returns want if nothing listens on it (the recipe's fixed
// ports), else a free port.
func slurmPort(t testing.TB, want int) int {
	t.Helper()
	if l, err := net.Listen("tcp", fmt.Sprintf(":%d", want)); err == nil {
		l.Close()
		return want
	}
	return freePort(t)
}

func (s *slurmSite) path(name string) string { return filepath.Join(s.dir, name) }

// writeTemplate renders e2e/testdata/slurm/<name>.tmpl to path.
func writeTemplate(t testing.TB, name, path string, mode os.FileMode, data any) {
	t.Helper()
	tmpl, err := template.ParseFiles(filepath.Join("testdata", "slurm", name+".tmpl"))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, data); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), mode); err != nil {
		t.Fatal(err)
	}
}

// start writes slurm.conf, starts munged, slurmctld and slurmd, and waits
// (at most 30 s) until the node is idle. They are stopped by pid when the
// test ends (slurmd, slurmctld, then munged).
func (s *slurmSite) start(cfg slurmConfig) {
	t := s.t
	t.Helper()
	if cfg.Cgroup {
		// Slurm reads cgroup.conf beside slurm.conf. Its cgroup/v1 plugin
		// needs the v1 freezer hierarchy: skipped with that reason (failed
		// in CI) on a pure cgroup v2 host.
		root := filepath.Dir(cgrouptest.V1Mount(t, "freezer"))
		text := "CgroupPlugin=cgroup/v1\nCgroupAutomount=no\nCgroupMountpoint=" + root + "\nConstrainCores=no\nConstrainRAMSpace=no\nConstrainDevices=no\n"
		if err := os.WriteFile(s.path("cgroup.conf"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeTemplate(t, "slurm.conf", s.conf, 0o644, struct {
		slurmConfig
		Dir, Host       string
		CtldPort, DPort int
	}{cfg, s.dir, s.host, s.ctldPort, s.dPort})

	s.startMunge()
	for _, name := range []string{"slurmctld", "slurmd"} {
		bin, _ := lookSlurm(name)
		s.daemons = append(s.daemons, startDaemon(t, name, nil, bin, "-D", "-f", s.conf))
	}
	s.waitNode("idle after start", 30*time.Second, func(state, _ string) bool { return state == "idle" })
}

// startMunge starts munged (the first daemon) and waits for its socket; the
// daemons are stopped by pid when the test ends.
func (s *slurmSite) startMunge() {
	t := s.t
	t.Helper()
	uid, gid := mungeIDs(t)
	munged, _ := lookSlurm("munged")
	s.daemons = append(s.daemons, startDaemon(t, "munged", &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)},
		munged, "-F", "-S", s.path("munge-run/munge.socket.2"), "--key-file="+s.path("munge/munge.key"),
		"--log-file="+s.path("munge/munged.log"), "--pid-file="+s.path("munge-run/munged.pid"),
		"--seed-file="+s.path("munge/munged.seed")))
	t.Cleanup(s.stop)
	s.waitFile(s.path("munge-run/munge.socket.2"), s.daemons[0])
}

func (s *slurmSite) waitFile(path string, d *daemon) {
	s.t.Helper()
	const timeout = 30 * time.Second
	ok := testutil.Poll(timeout, func() bool {
		_, err := os.Stat(path)
		return err == nil || d.exited()
	})
	if _, err := os.Stat(path); !ok || err != nil {
		s.t.Fatalf("%s: no %s within %v (exited: %v)\n%s\n%s", d.name, path, timeout, d.exited(), d.logs, tailFile(s.path("munge/munged.log"), 2000))
	}
}

// stop ends the daemons by pid, newest first, and logs their logs if the
// test failed.
func (s *slurmSite) stop() {
	for i := len(s.daemons) - 1; i >= 0; i-- {
		if err := s.daemons[i].stop(); err != nil {
			s.t.Errorf("stop: %v", err)
		}
	}
	if s.t.Failed() {
		for _, d := range s.daemons {
			if out := d.logs.String(); out != "" {
				s.t.Logf("=== output of %s:\n%s", d.name, out)
			}
		}
		logs, _ := filepath.Glob(s.path("log/*.log"))
		for _, f := range logs {
			s.t.Logf("=== %s:\n%s", filepath.Base(f), tailFile(f, 6000))
		}
	}
	s.daemons = nil
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = append([]byte("...\n"), b[len(b)-n:]...)
	}
	return string(b)
}

// run runs a Slurm client command against the site (at most 15 s).
func (s *slurmSite) run(name string, args ...string) (string, error) {
	bin, err := lookSlurm(name)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	argv := append([]string{bin}, args...)
	if s.netns != "" {
		argv = append([]string{"nsenter", "--net=/var/run/netns/" + s.netns}, argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = s.env, s.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func (s *slurmSite) must(name string, args ...string) string {
	s.t.Helper()
	out, err := s.run(name, args...)
	if err != nil {
		s.t.Fatal(err)
	}
	return out
}

// node returns Slurm's state of the node as sinfo prints it ("idle",
// "completing", "draining", "drained", "idle*"...) and its reason ("" for
// none).
func (s *slurmSite) node() (state, reason string, err error) { return s.nodeState(s.host) }

// nodeState is node() of the named node.
func (s *slurmSite) nodeState(node string) (state, reason string, err error) {
	out, err := s.run("sinfo", "-h", "-N", "-n", node, "-o", "%T|%E")
	if err != nil {
		return "", "", err
	}
	line, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	state, reason, _ = strings.Cut(line, "|")
	if reason == "none" {
		reason = ""
	}
	return state, reason, nil
}

// waitNode polls Slurm (every 50 ms, at most timeout) until cond holds, and
// returns that state and reason.
func (s *slurmSite) waitNode(what string, timeout time.Duration, cond func(state, reason string) bool) (string, string) {
	s.t.Helper()
	return s.waitNodeState(s.host, what, timeout, cond)
}

// waitNodeState is waitNode of the named node.
func (s *slurmSite) waitNodeState(node, what string, timeout time.Duration, cond func(state, reason string) bool) (string, string) {
	s.t.Helper()
	last, ok, err := pollSchedNode(timeout, func() (string, string, error) { return s.nodeState(node) }, cond)
	if !ok {
		s.t.Fatalf("slurm: node %s not %s within %v (last: %q %q, %v)\n%s", node, what, timeout, last.state, last.reason, err,
			tailFile(s.path("log/slurmctld.log"), 3000))
	}
	return last.state, last.reason
}

// submit runs sbatch with args (and output to /dev/null) and returns the
// job id.
func (s *slurmSite) submit(args ...string) string {
	s.t.Helper()
	out := s.must("sbatch", append([]string{"--parsable", "-o", "/dev/null"}, args...)...)
	id, _, _ := strings.Cut(strings.TrimSpace(out), ";")
	if _, err := strconv.Atoi(id); err != nil {
		s.t.Fatalf("sbatch printed %q", out)
	}
	return id
}

// jobGone reports whether squeue no longer lists job (it has left
// COMPLETING).
func (s *slurmSite) jobGone(job string) bool {
	out, err := s.run("squeue", "-h", "-j", job, "-o", "%T")
	return err == nil && strings.TrimSpace(out) == "" || err != nil && strings.Contains(err.Error(), "Invalid job id")
}

// expectedStart is the scheduler's expected start of a pending job
// (squeue --start): a time, or "N/A".
func (s *slurmSite) expectedStart(job string) string {
	out, err := s.run("squeue", "-h", "-j", job, "-o", "%S")
	if err != nil {
		return "error"
	}
	return strings.TrimSpace(out)
}
