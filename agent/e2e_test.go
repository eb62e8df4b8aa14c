package agent_test

// End-to-end tests of the node agent: the real nodeagent binary, real
// cgroups, real processes, the real socket API and CLI. Each test starts its
// own agent with a temporary state dir, socket and cgroup root.
//
// This file holds that harness (startNode and a node's methods); the tests
// are in the *_e2e_test.go files beside it.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/agent/cgroup"
	"github.com/gracewatch/gracewatch/agent/cgroup/cgrouptest"
	"github.com/gracewatch/gracewatch/agent/diagnose"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/internal/testutil/hangfs"
)

var nodeagentBin string

func TestMain(m *testing.M) {
	cgroup.RunShimIfRequested()
	hangfs.RunIfRequested()
	// The client as the package builds it (its start is what
	// BenchmarkEpilogTrue measures), and beside it the daemon that its
	// serve re-executes.
	dir, remove := testutil.ProgramsDir("nodeagent", "nodeagentd")
	nodeagentBin = filepath.Join(dir, "nodeagent")
	code := m.Run()
	remove()
	os.Exit(code)
}

// node is one nodeagent serve process under test.
type node struct {
	t      testing.TB
	dir    string
	socket string
	config string
	root   string
	cmd    *exec.Cmd
	logs   *testutil.SyncBuffer
	client *api.Client
	env    []string // more of the agent's environment (nodeOpts.env)
}

type nodeOpts struct {
	grace, killWait, unkillableAfter, autoResume string
	metricsListen                                string // [metrics] listen; empty: none
	teardown                                     string // more [teardown] keys (TOML lines)
	logLevel                                     string // log_level; empty: debug

	env []string // more of the agent's environment ("NOTIFY_SOCKET=...")
}

func startNode(t testing.TB, o nodeOpts) *node {
	t.Helper()
	testutil.RequireRoot(t)
	if o.grace == "" {
		o.grace = "3s"
	}
	if o.killWait == "" {
		o.killWait = "1s"
	}
	if o.unkillableAfter == "" {
		o.unkillableAfter = "2s"
	}
	if o.autoResume == "" {
		o.autoResume = "never"
	}
	// Socket paths must stay under 108 bytes: t.TempDir() can be longer.
	dir, err := os.MkdirTemp("", "gwe2e")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	n := &node{t: t, dir: dir, socket: filepath.Join(dir, "agent.sock"), config: filepath.Join(dir, "nodeagent.toml"),
		root: cgrouptest.TempRoot(t), logs: &testutil.SyncBuffer{}, env: o.env}
	cfg := testutil.AgentConfig{Node: "e2e", StateDir: filepath.Join(dir, "state"), Socket: n.socket, CgroupRoot: n.root,
		LogLevel: o.logLevel, Grace: o.grace, KillWait: o.killWait, UnkillableAfter: o.unkillableAfter,
		AutoResume: o.autoResume, Teardown: o.teardown, SampleInterval: "300ms", ReadTimeout: "1s"}
	if o.metricsListen != "" {
		cfg.Sections = fmt.Sprintf("[metrics]\nlisten = %q\n", o.metricsListen)
	}
	if err := os.WriteFile(n.config, []byte(cfg.Text()), 0o600); err != nil {
		t.Fatal(err)
	}
	n.client = api.NewClient(n.socket)
	n.start()
	t.Cleanup(n.stop)
	return n
}

func (n *node) start() {
	n.t.Helper()
	n.cmd = exec.Command(nodeagentBin, "serve", "--config", n.config)
	if n.env != nil {
		n.cmd.Env = append(os.Environ(), n.env...)
	}
	n.cmd.Stdout = n.logs
	n.cmd.Stderr = n.logs
	if err := n.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	var err error
	if !testutil.Poll(10*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err = n.client.Status(ctx)
		return err == nil
	}) {
		n.t.Fatalf("agent did not answer within 10s: %v\nlogs:\n%s", err, n.logs)
	}
}

// stop ends the agent by its pid (SIGTERM, then SIGKILL after 5 s).
func (n *node) stop() {
	if n.cmd == nil || n.cmd.Process == nil || n.cmd.ProcessState != nil {
		return
	}
	testutil.Stop(n.cmd, 5*time.Second)
	if n.t.Failed() {
		n.t.Logf("agent logs:\n%s", n.logs)
	}
}

// crash ends the agent with SIGKILL, as kill -9 would.
func (n *node) crash() {
	n.t.Helper()
	n.cmd.Process.Kill()
	n.cmd.Wait()
}

func (n *node) status() api.Status {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := n.client.Status(ctx)
	if err != nil {
		n.t.Fatalf("status: %v", err)
	}
	return st
}

// waitFor polls the status (bounded) until cond holds.
func (n *node) waitFor(what string, timeout time.Duration, cond func(api.Status) bool) api.Status {
	n.t.Helper()
	var st api.Status
	if !testutil.Poll(timeout, func() bool { st = n.status(); return cond(st) }) {
		n.t.Fatalf("timed out after %v waiting for %s; status: %+v\nlogs:\n%s", timeout, what, st, n.logs)
	}
	return st
}

// cli runs the nodeagent CLI against this node.
func (n *node) cli(args ...string) (stdout, stderr string, code int) {
	n.t.Helper()
	cmd := exec.Command(nodeagentBin, args...)
	cmd.Env = append(os.Environ(), "GRACEWATCH_SOCKET="+n.socket)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			n.t.Fatalf("run %v: %v", args, err)
		}
	}
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}

// epilog starts `nodeagent epilog` in the background.
func (n *node) epilog(job string, argv ...string) *exec.Cmd {
	n.t.Helper()
	cmd := exec.Command(nodeagentBin, append([]string{"epilog", "--job", job, "--"}, argv...)...)
	cmd.Env = append(os.Environ(), "GRACEWATCH_SOCKET="+n.socket)
	cmd.Stdout, cmd.Stderr = &bytes.Buffer{}, &bytes.Buffer{}
	return testutil.Start(n.t, cmd)
}

func (n *node) jobStart(job string, exp time.Time) {
	n.t.Helper()
	if _, e, code := n.cli("job", "start", "--job", job, "--expiration", exp.Format(time.RFC3339)); code != 0 {
		n.t.Fatalf("job start: exit %d: %s", code, e)
	}
}

func (n *node) reports() []*diagnose.Report {
	n.t.Helper()
	out, e, code := n.cli("diagnose", "--json")
	if code != 0 {
		n.t.Fatalf("diagnose: exit %d: %s", code, e)
	}
	var rs []*diagnose.Report
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		n.t.Fatalf("diagnose --json: %v\n%s", err, out)
	}
	return rs
}

func waitExit(t *testing.T, cmd *exec.Cmd, timeout time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		return cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		t.Fatalf("%v did not exit within %v", cmd.Args, timeout)
		return -1
	}
}

// alive reports whether pid runs (a zombie has exited).
func alive(pid int) bool {
	st := procState(pid)
	return st != "" && st != "Z"
}

// procState is the state letter of /proc/PID/stat ("" when gone).
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return ""
	}
	return string(b[i+2])
}
