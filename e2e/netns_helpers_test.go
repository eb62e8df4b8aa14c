package e2e

// Helpers of the network-namespace tests (netns_test.go): a mesh of one
// aggregator and several agents, each process in a network namespace of its
// own, with nftables faults inside those namespaces.
//
// Layout, all created by the test and removed by its cleanup:
//
//	gw-<rand>-hub   bridge br0 198.18.0.1/24, the aggregator (mesh and HTTP on
//	                198.18.0.1), one veth end v-nK per agent enslaved to br0
//	gw-<rand>-nK    eth0 198.18.0.(10+K)/24 (the veth's other end), one agent
//
// Nothing is added to the root namespace's network: the veth pairs are
// created inside the hub with their peer moved straight into the agent's
// namespace, and the test reaches the aggregator's HTTP API by dialling from
// a thread that entered the hub's namespace (hubTransport). 198.18.0.0/15 is
// the range reserved for benchmarking (RFC 2544); here it only exists inside
// the test's namespaces, which have no route anywhere else.
//
// Processes are started with `nsenter --net=/run/netns/NAME -- BIN ...`,
// not `ip netns exec`: ip netns exec also unshares the mount namespace and
// remounts /sys, which unmounts /sys/fs/cgroup, and the agent needs its
// cgroups. nsenter only switches the network namespace and execs, so the pid
// the test holds is the program's own (checked by startIn). The agents' Unix
// sockets and cgroups are shared with the root namespace, so the test drives
// them with `nodeagent --socket` from outside, as the loopback cluster does.
//
// This file builds the cluster and drives its agents' jobs; the
// namespaces' plumbing is in netns_namespaces_helpers_test.go, the faults
// in netns_faults_helpers_test.go, and what the tests read of the mesh in
// netns_watch_helpers_test.go.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/agent/cgroup/cgrouptest"
	"github.com/gracewatch/gracewatch/internal/testutil"
)

const (
	// netnsNet is the test's subnet; it exists only inside its namespaces.
	netnsNet      = "198.18.0."
	netnsHubAddr  = netnsNet + "1"
	netnsMeshPort = 7946
	netnsHTTPPort = 8470
	// netnsGrace and netnsAllowance are the agents' G and the aggregator's
	// clock_skew_allowance.
	netnsGrace     = 3 * time.Second
	netnsAllowance = time.Second
	// cmdTimeout bounds every ip/nft/nsenter command the helpers run.
	cmdTimeout = 15 * time.Second
)

var _, netnsCIDR, _ = net.ParseCIDR(netnsNet + "0/24")

// requireNetns skips (fails in CI) without root or the tools.
func requireNetns(t *testing.T) {
	t.Helper()
	testutil.RequireRoot(t)
	for _, tool := range []string{"ip", "nft", "nsenter"} {
		_, err := exec.LookPath(tool)
		testutil.Require(t, err == nil, fmt.Sprintf("needs %s (apt: iproute2, nftables, util-linux)", tool))
	}
}

// netnsCluster is one aggregator and n agents, each in its own namespace.
type netnsCluster struct {
	t       *testing.T
	prefix  string // gw-<rand>
	hub     string // the hub namespace's name
	dir     string
	keyfile string
	keys    *siteKeys
	label   string
	agg     *aggregator
	agents  []*agent
	ns      map[string]string // node (or "agg") -> namespace
	addr    map[string]string // node -> IP
}

// netnsRun runs a command (bounded) and returns its combined output.
func netnsRun(name string, args ...string) (string, error) {
	return netnsRunIn(nil, name, args...)
}

// netnsRunIn is netnsRun with stdin.
func netnsRunIn(stdin io.Reader, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = stdin
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

func (c *netnsCluster) must(name string, args ...string) string {
	c.t.Helper()
	out, err := netnsRun(name, args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// newNetnsCluster builds the namespaces, starts the aggregator and agents
// n1..nN, and waits until the aggregator serves every agent up.
func newNetnsCluster(t *testing.T, agents int) *netnsCluster {
	t.Helper()
	requireNetns(t)
	var b [3]byte
	_, _ = rand.Read(b[:])
	dir := t.TempDir()
	c := &netnsCluster{t: t, prefix: "gw-" + hex.EncodeToString(b[:]), dir: dir,
		ns: map[string]string{}, addr: map[string]string{}}
	c.label = "netns-" + c.prefix
	c.hub = c.prefix + "-hub"

	// Registered first, so it runs last: after every process is ended
	// and every socket into the namespaces is closed.
	var made []string
	t.Cleanup(func() { c.removeNamespaces(made) })

	if out, err := netnsRun("ip", "netns", "add", c.hub); err != nil {
		testutil.Require(t, false, fmt.Sprintf("cannot create a network namespace: %v %s", err, out))
	}
	made = append(made, c.hub)
	c.ns["agg"] = c.hub
	c.must("ip", "-n", c.hub, "link", "set", "lo", "up")
	c.must("ip", "-n", c.hub, "link", "add", "br0", "type", "bridge")
	c.must("ip", "-n", c.hub, "addr", "add", netnsHubAddr+"/24", "dev", "br0")
	c.must("ip", "-n", c.hub, "link", "set", "br0", "up")
	c.probeNftables()
	for i := 1; i <= agents; i++ {
		node := fmt.Sprintf("n%d", i)
		ns := c.prefix + "-" + node
		c.must("ip", "netns", "add", ns)
		made = append(made, ns)
		c.ns[node] = ns
		c.addr[node] = netnsNet + strconv.Itoa(10+i)
		veth := "v-" + node
		c.must("ip", "-n", c.hub, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
		c.must("ip", "-n", c.hub, "link", "set", veth, "master", "br0", "up")
		c.must("ip", "-n", ns, "link", "set", "lo", "up")
		c.must("ip", "-n", ns, "addr", "add", c.addr[node]+"/24", "dev", "eth0")
		c.must("ip", "-n", ns, "link", "set", "eth0", "up")
	}

	c.keyfile = filepath.Join(dir, "mesh.key")
	c.must(bins.aggregator, "keygen", c.keyfile)
	c.keys = newSiteKeys(t, dir)
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(netnsToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.useHubTransport()
	c.startAggregator()
	for i := 1; i <= agents; i++ {
		c.addAgent(fmt.Sprintf("n%d", i))
	}
	for _, a := range c.agents {
		c.agg.waitNode(t, a.node, "up", 30*time.Second, func(n node) bool { return n.State == "up" })
	}
	return c
}

func (c *netnsCluster) startAggregator() {
	c.t.Helper()
	cfg := filepath.Join(c.dir, "agg.toml")
	text := fmt.Sprintf(`name = "agg"
log_format = "json"
log_level = "debug"

[mesh]
bind = "%[1]s:%[2]d"
join = []
label = %[3]q
keyring = %[4]q
site_key_file = %[9]q
rejoin_interval = "2s"

[http]
listen = "%[1]s:%[5]d"
admin_token_file = %[6]q

[policy]
grace = %[7]q
clock_skew_allowance = %[8]q
`, netnsHubAddr, netnsMeshPort, c.label, c.keyfile, netnsHTTPPort, filepath.Join(c.dir, "token"), netnsGrace.String(), netnsAllowance.String(), c.keys.site)
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		c.t.Fatal(err)
	}
	g := &aggregator{proc: &proc{t: c.t, name: "agg", logs: &testutil.SyncBuffer{}},
		url: fmt.Sprintf("http://%s:%d", netnsHubAddr, netnsHTTPPort), config: cfg}
	c.startIn(c.hub, g.proc, bins.aggregator, "serve", "--config", cfg)
	g.waitReady()
	c.checkIn(c.hub, g.cmd.Process.Pid, bins.aggregator)
	c.agg = g
}

func (c *netnsCluster) addAgent(name string) *agent {
	c.t.Helper()
	dir := filepath.Join(c.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	// TempRoot's cleanup (kill what is left in the cgroups, remove them) is
	// registered before the agent's stop, so it runs after it.
	a := &agent{node: name, socket: filepath.Join(dir, "a.sock"), root: cgrouptest.TempRoot(c.t),
		config: filepath.Join(dir, "nodeagent.toml")}
	text := agentConfig{
		node: name, dir: dir, socket: a.socket, root: a.root,
		grace: netnsGrace.String(), killWait: "2s", unkillableAfter: "2s",
		bind:  fmt.Sprintf("%s:%d", c.addr[name], netnsMeshPort),
		join:  []string{fmt.Sprintf("%s:%d", netnsHubAddr, netnsMeshPort)},
		label: c.label, keyring: c.keyfile,
		keys: fmt.Sprintf("node_key_file = %q\naggregator_keys_file = %q", c.keys.nodeKey(name), c.keys.public),
	}.text()
	if err := os.WriteFile(a.config, []byte(text), 0o600); err != nil {
		c.t.Fatal(err)
	}
	a.proc = &proc{t: c.t, name: name, logs: &testutil.SyncBuffer{}}
	a.client = api.NewClient(a.socket)
	c.startIn(c.ns[name], a.proc, bins.nodeagent, "serve", "--config", a.config)
	a.waitAPI()
	// nodeagent serve has re-executed nodeagentd (same pid) by the time
	// the API answers.
	c.checkIn(c.ns[name], a.cmd.Process.Pid, bins.nodeagentd)
	c.agents = append(c.agents, a)
	return a
}

// agent returns the agent of node name.
func (c *netnsCluster) agent(name string) *agent {
	for _, a := range c.agents {
		if a.node == name {
			return a
		}
	}
	c.t.Fatalf("no agent %s", name)
	return nil
}

// hosts lists the aggregator's host and every agent's.
func (c *netnsCluster) hosts() []string {
	out := []string{"agg"}
	for _, a := range c.agents {
		out = append(out, a.node)
	}
	return out
}

// netnsToken is the administrators' token of the netns clusters.
const netnsToken = "s3cret-token-for-tests"

// statusJSON is `nodeagent status --json` of agent a.
func statusJSON(t *testing.T, a *agent) api.Status {
	t.Helper()
	out, code := a.cli("status", "--json")
	var st api.Status
	if code != 0 {
		t.Fatalf("nodeagent status --json of %s: exit %d: %s", a.node, code, out)
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("nodeagent status --json of %s: %v\n%s", a.node, err, out)
	}
	return st
}

// deadlineOf waits (bounded) until job is in teardown on a and returns its
// deadline D as the agent reports it.
func deadlineOf(t *testing.T, a *agent, job string) time.Time {
	t.Helper()
	var d time.Time
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("a deadline of job %s on %s", job, a.node), func() bool {
		for _, j := range statusJSON(t, a).Jobs {
			if j.ID == job && j.Deadline != nil {
				d = *j.Deadline
				return true
			}
		}
		return false
	})
	return d
}

// waitReleased waits (bounded) until job's teardown on a is over.
func waitReleased(t *testing.T, a *agent, job string) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, fmt.Sprintf("the release of job %s on %s", job, a.node), func() bool {
		for _, j := range statusJSON(t, a).Jobs {
			if j.ID == job && j.Phase != "released" {
				return false
			}
		}
		return true
	})
}

// hungEpilog starts an epilogue that ignores SIGTERM on a (the agent
// SIGKILLs it kill_wait after D).
func hungEpilog(a *agent, job string) {
	a.epilog(job, "sh", "-c", "trap '' TERM; exec sleep 300")
}

// quickEpilog runs, to its end (bounded), an epilogue that finishes well
// within grace; it returns an error naming the job on failure.
func quickEpilog(ctx context.Context, a *agent, job string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.nodeagent, "epilog", "--job", job, "--", "sleep", "0.5")
	cmd.Env = append(os.Environ(), "GRACEWATCH_SOCKET="+a.socket)
	out, err := cmd.CombinedOutput()
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("%s: epilog %s: %v: %s", a.node, job, err, out)
	}
	return nil
}
