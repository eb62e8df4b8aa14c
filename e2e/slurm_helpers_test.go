package e2e

// Helpers of the Slurm tests (slurm_test.go): a one-node Slurm on loopback
// (munged, slurmctld, slurmd as child processes, all state in a temporary
// folder, after /work/shared/notes/slurm-on-one-machine.md), the FUSE file
// system that makes the real epilogue hang (hangfs-serve, a process of its
// own), and Slurm's view of the node.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/agent/cgroup/cgrouptest"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/internal/testutil/hangfs"
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

// epilogStart returns when the real epilogue of job started (it appends
// "JOB UNIXTIME" to the starts file), waiting at most timeout.
func (s *slurmSite) epilogStart(job string, timeout time.Duration) time.Time {
	s.t.Helper()
	at, err := waitStamp(s.path("epilog-starts"), timeout, job)
	if err != nil {
		s.t.Fatalf("the epilogue of job %s did not start within %v: %v\n%s", job, timeout, err, tailFile(s.path("log/slurmd.log"), 3000))
	}
	return at
}

// waitStamp waits at most timeout for a line "KEY... UNIXTIME" whose keys
// are key in file (a test's epilogue or housekeeping appends one when it
// starts) and returns its time.
func waitStamp(file string, timeout time.Duration, key ...string) (time.Time, error) {
	at, err, _ := testutil.PollRead(timeout, func() (time.Time, error) {
		data, err := os.ReadFile(file)
		if err != nil {
			return time.Time{}, err
		}
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) == len(key)+1 && slices.Equal(f[:len(key)], key) {
				sec, err := strconv.ParseFloat(f[len(key)], 64)
				if err != nil {
					return time.Time{}, fmt.Errorf("%s: %q: %w", file, line, err)
				}
				return time.Unix(0, int64(sec*1e9)), nil
			}
		}
		return time.Time{}, fmt.Errorf("no line for %s in %s", strings.Join(key, " "), file)
	}, func(time.Time) bool { return true })
	return at, err
}

// writeRealEpilog writes the hung real epilogue (it reads hang's file) to
// epilog.real.
func (s *slurmSite) writeRealEpilog(hangFile string) string {
	s.t.Helper()
	p := s.path("epilog.real")
	writeTemplate(s.t, "epilog.real", p, 0o755, map[string]string{"HangFile": hangFile, "Starts": s.path("epilog-starts")})
	return p
}

// writeGracewatchEpilog writes Slurm's Epilog= for gracewatch: the shipped
// wrapper packaging/examples/nodeagent/slurm-epilog.sh with the test's paths
// of nodeagent and the real epilogue, behind a two-line script that points
// GRACEWATCH_SOCKET at agent a. It returns the Epilog= path.
func (s *slurmSite) writeGracewatchEpilog(a *agent, realEpilog string) string {
	s.t.Helper()
	wrapper := s.writeEpilogWrapper(realEpilog)
	p := s.path("epilog.sh")
	writeTemplate(s.t, "epilog-gracewatch.sh", p, 0o755, map[string]string{"Socket": a.socket, "Wrapper": wrapper})
	return p
}

// writeEpilogWrapper writes the shipped wrapper
// (packaging/examples/nodeagent/slurm-epilog.sh) with the test's paths of
// nodeagent and of the real epilogue, and returns its path.
func (s *slurmSite) writeEpilogWrapper(realEpilog string) string {
	s.t.Helper()
	wrapper := s.path("slurm-epilog.sh")
	text := readExample(s.t, "nodeagent/slurm-epilog.sh")
	text = replaceOnce(s.t, text, "/usr/sbin/nodeagent", bins.nodeagent)
	text = replaceOnce(s.t, text, "/etc/slurm/epilog.real", realEpilog)
	if err := os.WriteFile(wrapper, []byte(text), 0o755); err != nil {
		s.t.Fatal(err)
	}
	return wrapper
}

// slurmActuators returns packaging/examples/aggregator/actuator-slurm.toml,
// running a copy of the shipped slurm-actuator.sh.
func (s *slurmSite) slurmActuators() string {
	s.t.Helper()
	script := s.path("slurm-actuator.sh")
	if err := os.WriteFile(script, []byte(actuatorScript(s.t, "aggregator/slurm-actuator.sh")), 0o755); err != nil {
		s.t.Fatal(err)
	}
	text := readExample(s.t, "aggregator/actuator-slurm.toml")
	if n := strings.Count(text, `"/etc/gracewatch/slurm-actuator.sh"`); n != 3 {
		s.t.Fatalf("actuator-slurm.toml runs /etc/gracewatch/slurm-actuator.sh %d times, want 3 (down, up and reason)", n)
	}
	return "\n" + strings.ReplaceAll(text, `"/etc/gracewatch/slurm-actuator.sh"`, fmt.Sprintf("%q", script))
}

func readExample(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "packaging", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// replaceOnce replaces the one command line use of old (a line that is not
// a comment) by new.
func replaceOnce(t testing.TB, text, old, new string) string {
	t.Helper()
	lines := strings.Split(text, "\n")
	n := 0
	for i, l := range lines {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") && strings.Contains(l, old) {
			lines[i] = strings.ReplaceAll(l, old, new)
			n++
		}
	}
	if n != 1 {
		t.Fatalf("the example uses %s on %d command lines, want 1", old, n)
	}
	return strings.Join(lines, "\n")
}

// hangServer is hangfs-serve (internal/testutil/hangfs) as a process of its
// own, mounted at mnt: reads of mnt/hang never answer until it is stopped.
type hangServer struct {
	t     testing.TB
	mnt   string
	cmd   *exec.Cmd
	done  chan struct{}
	ready chan struct{} // closed when the server says hangfs.ReadyLine
	reads chan struct{} // one value per read of "hang" the server took
	logs  *testutil.SyncBuffer
	once  sync.Once
	err   error
}

var hangfsBin struct {
	sync.Once
	path string
	err  error
}

// buildHangfs builds hangfs-serve once, beside the test's other binaries.
func buildHangfs(t testing.TB) string {
	t.Helper()
	hangfsBin.Do(func() {
		hangfsBin.path = filepath.Join(filepath.Dir(bins.nodeagent), "hangfs-serve")
		out, err := exec.Command("go", "build", "-o", hangfsBin.path,
			"github.com/gracewatch/gracewatch/internal/testutil/hangfs/hangfs-serve").CombinedOutput()
		if err != nil {
			hangfsBin.err = fmt.Errorf("build hangfs-serve: %v\n%s", err, out)
		}
	})
	if hangfsBin.err != nil {
		t.Fatal(hangfsBin.err)
	}
	return hangfsBin.path
}

// startHangfs mounts hangfs at mnt (created) and waits, at most 10 s, until
// the server says it is ready (its own look at the mount while mounting is
// over). It is stopped when the test ends, if not before.
func startHangfs(t testing.TB, mnt string) *hangServer {
	t.Helper()
	bin := buildHangfs(t)
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	h := &hangServer{t: t, mnt: mnt, done: make(chan struct{}), ready: make(chan struct{}), reads: make(chan struct{}, 64), logs: &testutil.SyncBuffer{}}
	h.cmd = exec.Command(bin, mnt)
	h.cmd.Stderr = h.logs
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := h.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			switch sc.Text() {
			case hangfs.ReadyLine:
				close(h.ready)
			case "hung-read":
				h.reads <- struct{}{}
			}
		}
		h.cmd.Wait()
		close(h.done)
	}()
	t.Cleanup(func() {
		if err := h.stop(); err != nil {
			t.Error(err)
		}
	})
	select {
	case <-h.ready:
	case <-h.done:
		t.Fatalf("hangfs-serve exited before mounting %s: %s", mnt, h.logs)
	case <-time.After(10 * time.Second):
		t.Fatalf("hangfs-serve: not ready at %s after 10 s: %s", mnt, h.logs)
	}
	return h
}

func (h *hangServer) file() string { return filepath.Join(h.mnt, "hang") }

// waitRead waits (at most timeout) for the next read of "hang" the server
// took and will never answer.
func (h *hangServer) waitRead(timeout time.Duration) {
	h.t.Helper()
	select {
	case <-h.reads:
	case <-h.done:
		h.t.Fatalf("hangfs-serve exited: %s", h.logs)
	case <-time.After(timeout):
		h.t.Fatalf("no read of %s within %v", h.file(), timeout)
	}
}

// stop aborts the server's FUSE connection (the hung reader gets an error,
// and so would a thread of the server waiting on its own mount, which
// SIGKILL alone leaves in D for ever), kills the server by its pid, then
// unmounts and removes the mountpoint.
func (h *hangServer) stop() error {
	h.once.Do(func() {
		if err := hangfs.AbortConnection(h.mnt); err != nil {
			h.err = err
		}
		h.cmd.Process.Kill()
		select {
		case <-h.done:
		case <-time.After(10 * time.Second):
			h.err = errors.Join(h.err, fmt.Errorf("hangfs-serve pid %d did not exit within 10 s of its connection's abort and SIGKILL", h.cmd.Process.Pid))
			return
		}
		if err := syscall.Unmount(h.mnt, syscall.MNT_DETACH); err != nil && err != syscall.EINVAL && err != syscall.ENOENT {
			h.err = errors.Join(h.err, fmt.Errorf("unmount %s: %v", h.mnt, err))
			return
		}
		if err := os.Remove(h.mnt); err != nil && !os.IsNotExist(err) {
			h.err = errors.Join(h.err, err)
		}
	})
	return h.err
}

// siteDir makes a scheduler site's folder in /tmp (mode 0755: its daemons
// and jobs run as other users too), removed when the test ends unless
// something is still mounted in it: a FUSE mount left behind hangs or fails
// RemoveAll, so the folder is left and the test says so.
func siteDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if m := mountsUnder(dir); len(m) > 0 {
			t.Errorf("not removing %s: still mounted %v", dir, m)
			return
		}
		os.RemoveAll(dir)
	})
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// mountsUnder lists the mount points at or under dir (/proc/self/mountinfo).
func mountsUnder(dir string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := strings.ReplaceAll(f[4], `\040`, " ")
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out
}

// agentStatus is `nodeagent status --json` of agent a.
func agentStatus(t testing.TB, a *agent) api.Status {
	t.Helper()
	out, code := a.cli("status", "--json")
	var st api.Status
	if code != 0 {
		t.Fatalf("nodeagent status --json: exit %d: %s", code, out)
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("nodeagent status --json: %v\n%s", err, out)
	}
	return st
}

// jobDeadline waits (at most 30 s) until the agent has job in teardown, and
// returns the job.
func jobDeadline(t testing.TB, a *agent, job string) api.Job {
	t.Helper()
	var found api.Job
	if !testutil.Poll(30*time.Second, func() bool {
		for _, j := range agentStatus(t, a).Jobs {
			if j.ID == job && j.Deadline != nil {
				found = j
				return true
			}
		}
		return false
	}) {
		t.Fatalf("agent %s: job %s has no teardown deadline after 30 s: %+v", a.node, job, agentStatus(t, a).Jobs)
	}
	return found
}

// pidIn finds, in the agent's cgroups of job, a process named comm.
func pidIn(t testing.TB, a *agent, job, comm string) int {
	t.Helper()
	root := filepath.Join(a.root, "job-"+job)
	found := 0
	if !testutil.Poll(30*time.Second, func() bool {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.Name() != "cgroup.procs" || found != 0 {
				return nil
			}
			data, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(data)) {
				pid, _ := strconv.Atoi(f)
				// comm, never cmdline: reading a hung process's cmdline can block.
				c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
				if strings.TrimSpace(string(c)) == comm {
					found = pid
				}
			}
			return nil
		})
		return found != 0
	}) {
		t.Fatalf("no %s process in %s within 30 s", comm, root)
	}
	return found
}

// actuatorRuns counts the aggregator's successful runs of its on=on
// actuators (gracewatch_aggregator_actuator_runs_total, not its log lines:
// those are within each node's log budget); -1 when /metrics does not
// answer.
func actuatorRuns(g *aggregator, on string) int {
	resp, err := http.Get(g.url + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1
	}
	prefix := `gracewatch_aggregator_actuator_runs_total{on="` + on + `",result="success"} `
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			var v float64
			fmt.Sscanf(rest, "%g", &v)
			return int(v)
		}
	}
	return 0
}

// waitActuatorRuns waits (at most timeout) until the aggregator ran its
// on=on actuators n times.
func waitActuatorRuns(t testing.TB, g *aggregator, on string, n int, timeout time.Duration) {
	t.Helper()
	if !testutil.Poll(timeout, func() bool { return actuatorRuns(g, on) >= n }) {
		t.Fatalf("%s: %d on=%s actuator runs after %v, want %d", g.name, actuatorRuns(g, on), on, timeout, n)
	}
}

// aggregatorCLI runs `aggregator ARGS --url URL --token-file TOKEN`.
func aggregatorCLI(t testing.TB, c *cluster, g *aggregator, args ...string) string {
	t.Helper()
	args = append(args, "--url", g.url, "--token-file", filepath.Join(c.dir, "token"))
	out, err := exec.Command(bins.aggregator, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("aggregator %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
