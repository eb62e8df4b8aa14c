// Package e2e holds cluster tests: real nodeagent and aggregator processes
// joined in a real memberlist mesh on loopback, real cgroups and processes,
// driven through their CLIs and HTTP APIs as a scheduler and an
// administrator would.
package e2e

// This file holds the cluster harness (a mesh of aggregators and agents on
// loopback); its processes are in harness_proc_test.go, their configuration
// in harness_config_test.go, and the aggregator's HTTP API as the tests use
// it in harness_http_test.go.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/agent/cgroup/cgrouptest"
	"github.com/gracewatch/gracewatch/internal/testutil"
)

var bins struct{ nodeagent, nodeagentd, aggregator string }

// aggSettle is the aggregators' [policy] settle: how long they hold a node
// they have just come to know before gossip alone makes it down or
// actuated.
const aggSettle = 2 * time.Second

func TestMain(m *testing.M) {
	dir, remove := testutil.ProgramsDir("nodeagent", "nodeagentd", "aggregator")
	bins.nodeagent = filepath.Join(dir, "nodeagent")
	bins.nodeagentd = filepath.Join(dir, "nodeagentd")
	bins.aggregator = filepath.Join(dir, "aggregator")
	code := m.Run()
	remove()
	os.Exit(code)
}

// cluster is a mesh of aggregators and agents on loopback.
type cluster struct {
	t       testing.TB
	dir     string
	keyfile string
	keys    *siteKeys
	token   string
	label   string
	seeds   []string
	aggs    []*aggregator
	agents  []*agent
	extra   string // appended to every agent config
	aggConf string // appended to every aggregator config
	// Node restriction's rollout: aggregators with allow_unsigned, and
	// the agents named in keyless with no keys (and allow_unsigned).
	aggAllowUnsigned bool
	keyless          map[string]bool
	// grace is G of every agent and aggregator ("" is 3s);
	// teardown, more keys of the agents' [teardown] table; killWait and
	// unkillableAfter, the agents' ("" is 30s).
	grace, teardown, killWait, unkillableAfter string
	// mode is every agent's and aggregator's mode ("": the default).
	mode string
}

// modeLine is the configuration's top-level mode key, or nothing.
func (c *cluster) modeLine() string {
	if c.mode == "" {
		return ""
	}
	return fmt.Sprintf("mode = %q\n", c.mode)
}

func or30s(s string) string {
	if s == "" {
		return "30s"
	}
	return s
}

// graceOr is the cluster's G.
func (c *cluster) graceOr() string {
	if c.grace == "" {
		return "3s"
	}
	return c.grace
}

type aggregator struct {
	*proc
	url    string
	config string
}

type agent struct {
	*proc
	node   string
	socket string
	root   string
	config string
	bind   string // its mesh address
	client *api.Client
}

func newCluster(t testing.TB) *cluster {
	t.Helper()
	testutil.RequireRoot(t)
	dir, err := os.MkdirTemp("", "gwcl")
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, dir: dir, label: "e2e-" + filepath.Base(dir), token: "s3cret-token-for-tests"}
	c.keyfile = filepath.Join(dir, "mesh.key")
	if out, err := exec.Command(bins.aggregator, "keygen", c.keyfile).CombinedOutput(); err != nil {
		t.Fatalf("keygen: %v %s", err, out)
	}
	c.keys = newSiteKeys(t, dir)
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(c.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, a := range c.agents {
			a.stop()
			a.dumpIfFailed()
		}
		for _, g := range c.aggs {
			g.stop()
			g.dumpIfFailed()
		}
		os.RemoveAll(dir)
	})
	return c
}

// addAggregator starts an aggregator; the first one is every member's seed.
func (c *cluster) addAggregator(name string) *aggregator {
	c.t.Helper()
	mport, hport := freePort(c.t), freePort(c.t)
	cfg := filepath.Join(c.dir, name+".toml")
	join := c.seeds
	// A state_dir, as the packaged unit has (systemd's StateDirectory=): a
	// restarted aggregator remembers what it drained.
	text := c.modeLine() + fmt.Sprintf(`name = %q
log_format = "json"
log_level = "debug"
state_dir = %q

[mesh]
bind = "127.0.0.1:%d"
join = %s
label = %q
keyring = %q
site_key_file = %q
allow_unsigned = %t
rejoin_interval = "2s"

[http]
listen = "127.0.0.1:%d"
admin_token_file = %q

[policy]
grace = %q
clock_skew_allowance = "1s"
settle = %q
%s`, name, filepath.Join(c.dir, name+"-state"), mport, tomlList(join), c.label, c.keyfile, c.keys.site, c.aggAllowUnsigned, hport, filepath.Join(c.dir, "token"), c.graceOr(), aggSettle.String(), c.aggConf)
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		c.t.Fatal(err)
	}
	g := &aggregator{proc: &proc{t: c.t, name: name, args: []string{bins.aggregator, "serve", "--config", cfg}, logs: &testutil.SyncBuffer{}},
		url: fmt.Sprintf("http://127.0.0.1:%d", hport), config: cfg}
	g.start()
	c.seeds = append(c.seeds, fmt.Sprintf("127.0.0.1:%d", mport))
	c.aggs = append(c.aggs, g)
	g.waitReady()
	return g
}

func (g *aggregator) waitReady() {
	g.t.Helper()
	if !testutil.Poll(15*time.Second, func() bool {
		resp, err := http.Get(g.url + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}) {
		g.t.Fatalf("aggregator %s not healthy\n%s", g.name, g.logs)
	}
}

// addAgent starts a node agent joined to the cluster.
func (c *cluster) addAgent(node string) *agent {
	c.t.Helper()
	dir := filepath.Join(c.dir, node)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	a := &agent{node: node, socket: filepath.Join(dir, "a.sock"), root: cgrouptest.TempRoot(c.t), config: filepath.Join(dir, "nodeagent.toml"), bind: agentBind(c.t)}
	text := c.modeLine() + agentConfig{
		node: node, dir: dir, socket: a.socket, root: a.root,
		grace: c.graceOr(), killWait: or30s(c.killWait), unkillableAfter: or30s(c.unkillableAfter), teardown: c.teardown,
		bind: a.bind, join: c.seeds, label: c.label, keyring: c.keyfile, keys: c.agentKeys(node),
	}.text() + c.extra
	if err := os.WriteFile(a.config, []byte(text), 0o600); err != nil {
		c.t.Fatal(err)
	}
	a.proc = &proc{t: c.t, name: node, args: []string{bins.nodeagent, "serve", "--config", a.config}, logs: &testutil.SyncBuffer{}}
	a.client = api.NewClient(a.socket)
	a.start()
	a.waitAPI()
	c.agents = append(c.agents, a)
	return a
}

func (a *agent) waitAPI() {
	a.t.Helper()
	if !testutil.Poll(10*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := a.client.Status(ctx)
		return err == nil
	}) {
		a.t.Fatalf("agent %s did not answer\n%s", a.node, a.logs)
	}
}

func (a *agent) status() api.Status {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := a.client.Status(ctx)
	if err != nil {
		a.t.Fatalf("status of %s: %v", a.node, err)
	}
	return st
}

func (a *agent) cli(args ...string) (string, int) {
	a.t.Helper()
	cmd := exec.Command(bins.nodeagent, args...)
	cmd.Env = append(os.Environ(), "GRACEWATCH_SOCKET="+a.socket)
	out, _ := cmd.CombinedOutput()
	return string(out), cmd.ProcessState.ExitCode()
}

// epilog starts `nodeagent epilog` in the background.
func (a *agent) epilog(job string, argv ...string) *exec.Cmd {
	a.t.Helper()
	return a.epilogArgs(append([]string{"--job", job, "--"}, argv...)...)
}

// epilogArgs starts `nodeagent epilog ARGS` on a in the background.
func (a *agent) epilogArgs(args ...string) *exec.Cmd {
	a.t.Helper()
	cmd := exec.Command(bins.nodeagent, append([]string{"epilog"}, args...)...)
	cmd.Env = append(os.Environ(), "GRACEWATCH_SOCKET="+a.socket)
	return testutil.Start(a.t, cmd)
}
