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

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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

// probeNftables loads and deletes a fault table on the hub's bridge: the
// faults need nftables' netdev ingress and egress hooks (egress: Linux
// 5.16). Without them the tests skip, and fail when CI=true.
func (c *netnsCluster) probeNftables() {
	c.t.Helper()
	script := `table netdev gwprobe {
	chain in { type filter hook ingress device "br0" priority 0; counter; }
	chain out { type filter hook egress device "br0" priority 0; counter; }
}
`
	_, err := netnsRunIn(strings.NewReader(script), "ip", "netns", "exec", c.hub, "nft", "-f", "-")
	if err == nil {
		_, err = netnsRun("ip", "netns", "exec", c.hub, "nft", "delete", "table", "netdev", "gwprobe")
	}
	testutil.Require(c.t, err == nil, fmt.Sprintf("needs nftables with the netdev ingress and egress hooks (Linux 5.16 or later): %v", err))
}

// removeNamespaces ends any process still inside one of the test's
// namespaces (by pid), deletes the nft tables, veths and bridge explicitly,
// then the namespaces; it reports what it could not remove.
func (c *netnsCluster) removeNamespaces(names []string) {
	for i := len(names) - 1; i >= 0; i-- {
		ns := names[i]
		if tid := threadIn(ns); tid != 0 {
			c.t.Errorf("thread %d of the test process is in namespace %s", tid, ns)
		}
		if out, err := netnsRun("ip", "netns", "pids", ns); err == nil {
			for _, f := range strings.Fields(out) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
					c.t.Errorf("process %d was still in namespace %s at cleanup; killing it", pid, ns)
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		_, _ = netnsRun("ip", "netns", "exec", ns, "nft", "delete", "table", "netdev", "gw")
		if ns == c.hub {
			for node := range c.addr {
				_, _ = netnsRun("ip", "-n", ns, "link", "del", "v-"+node)
			}
			_, _ = netnsRun("ip", "-n", ns, "link", "del", "br0")
		}
		if _, err := netnsRun("ip", "netns", "del", ns); err != nil {
			c.t.Errorf("cleanup: %v", err)
		}
	}
	if out, err := netnsRun("ip", "netns", "list"); err == nil && strings.Contains(out, c.prefix) {
		c.t.Errorf("cleanup: namespaces left behind:\n%s", out)
	}
}

// keepLog writes p's whole log to $GRACEWATCH_NETNS_LOGDIR/<test>-<name>.log
// when that variable is set (dumpIfFailed shows only the end).
func keepLog(t *testing.T, p *proc) {
	dir := os.Getenv("GRACEWATCH_NETNS_LOGDIR")
	if dir == "" {
		return
	}
	path := filepath.Join(dir, t.Name()+"-"+p.name+".log")
	if err := os.WriteFile(path, []byte(p.logs.String()), 0o644); err != nil {
		t.Errorf("keep log: %v", err)
	}
}

// threadIn returns a thread of this process that is in namespace ns, or 0.
func threadIn(ns string) int {
	var want unix.Stat_t
	if unix.Stat("/run/netns/"+ns, &want) != nil {
		return 0
	}
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		var st unix.Stat_t
		if unix.Stat("/proc/self/task/"+task.Name()+"/ns/net", &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino {
			tid, _ := strconv.Atoi(task.Name())
			return tid
		}
	}
	return 0
}

// startIn fills p.args to run argv in namespace ns, starts it, and registers
// its stop (and log dump) as a cleanup.
func (c *netnsCluster) startIn(ns string, p *proc, argv ...string) {
	c.t.Helper()
	p.args = append([]string{"nsenter", "--net=/run/netns/" + ns, "--"}, argv...)
	p.start()
	c.t.Cleanup(func() {
		p.stop()
		p.dumpIfFailed()
		keepLog(c.t, p)
	})
}

// checkIn verifies that pid is the program itself (nsenter exec'd, so
// signals to the pid reach it) and that it runs in namespace ns.
func (c *netnsCluster) checkIn(ns string, pid int, bin string) {
	c.t.Helper()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil || exe != bin {
		c.t.Fatalf("pid %d runs %q (%v), want %s", pid, exe, err, bin)
	}
	var want, got unix.Stat_t
	if err := unix.Stat("/run/netns/"+ns, &want); err != nil {
		c.t.Fatal(err)
	}
	if err := unix.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &got); err != nil {
		c.t.Fatal(err)
	}
	if want.Dev != got.Dev || want.Ino != got.Ino {
		c.t.Fatalf("pid %d is not in network namespace %s", pid, ns)
	}
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

// hubTransport sends requests for the test's subnet through connections
// dialled inside the hub namespace, and everything else as before.
type hubTransport struct {
	orig http.RoundTripper
	hub  *http.Transport
}

func (h *hubTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if ip := net.ParseIP(r.URL.Hostname()); ip != nil && netnsCIDR.Contains(ip) {
		return h.hub.RoundTrip(r)
	}
	return h.orig.RoundTrip(r)
}

// useHubTransport installs a hubTransport as http.DefaultTransport for the
// test's lifetime, so the harness's helpers (waitReady, nodes, waitNode,
// watch, post), which use the default client, reach the aggregator in the
// hub. Only requests to 198.18.0.0/24 change route. The netns tests must
// therefore not run in parallel with each other (none calls t.Parallel).
func (c *netnsCluster) useHubTransport() {
	path := "/run/netns/" + c.hub
	ht := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialInNetns(ctx, path, network, addr)
		},
		DisableCompression: true,
		MaxIdleConns:       4,
		IdleConnTimeout:    30 * time.Second,
	}
	orig := http.DefaultTransport
	http.DefaultTransport = &hubTransport{orig: orig, hub: ht}
	// Runs before removeNamespaces: an open socket would keep the hub's
	// namespace alive after `ip netns del`.
	c.t.Cleanup(func() {
		http.DefaultTransport = orig
		ht.CloseIdleConnections()
	})
}

// dialInNetns dials addr from a thread that entered the network namespace
// at nsPath. The socket belongs to that namespace for its whole life. The
// thread is never unlocked: it ends with the goroutine, so no other
// goroutine ever runs in the namespace. It is never the main thread.
func dialInNetns(ctx context.Context, nsPath, network, addr string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// The main thread: Go wedges rather than ends it, and the
			// process's own namespace is read from it. Dial from another
			// goroutine while this one holds the main thread, so that
			// one cannot land here.
			conn, err := dialInNetns(ctx, nsPath, network, addr)
			runtime.UnlockOSThread()
			ch <- result{conn, err}
			return
		}
		fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- result{nil, fmt.Errorf("open %s: %w", nsPath, err)}
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			ch <- result{nil, fmt.Errorf("setns %s: %w", nsPath, err)}
			return
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		ch <- result{conn, err}
	}()
	r := <-ch
	return r.conn, r.err
}

// nft loads an nft script into namespace ns.
func (c *netnsCluster) nft(ns, script string) {
	c.t.Helper()
	if _, err := netnsRunIn(strings.NewReader(script), "ip", "netns", "exec", ns, "nft", "-f", "-"); err != nil {
		c.t.Fatalf("nft in %s: %v\nscript:\n%s", ns, err, script)
	}
}

// Faults are a table "netdev gw" in the host's namespace, hooked on its
// NIC (an agent's eth0, the hub's br0, through which the aggregator talks to
// the bridge) at ingress and egress: packets vanish on the wire, as on a
// bad link or a dead switch port. Filtering in the inet output hook instead
// would fail the sender's sendto() with EPERM and a TCP connect at once,
// which no real network does. Bridged traffic between agents does not pass
// br0's hooks, so a fault on the hub affects only the aggregator's traffic.

// netnsNIC is the interface of host in its namespace.
func netnsNIC(host string) string {
	if host == "agg" {
		return "br0"
	}
	return "eth0"
}

// clearFaults removes the test's table from the host's namespace (healing a
// cut or ending a loss).
func (c *netnsCluster) clearFaults(host string) {
	c.t.Helper()
	c.must("ip", "netns", "exec", c.ns[host], "nft", "delete", "table", "netdev", "gw")
}

// cut drops every packet on host's NIC, both ways: the host is cut off from
// the mesh while its agent and its Unix socket keep working.
func (c *netnsCluster) cut(host string) {
	c.t.Helper()
	c.nft(c.ns[host], fmt.Sprintf(`table netdev gw {
	chain in { type filter hook ingress device %[1]q priority 0; counter drop; }
	chain out { type filter hook egress device %[1]q priority 0; counter drop; }
}
`, netnsNIC(host)))
}

// loss drops pct % of the packets on host's NIC at random, in and out. The
// first counter of each chain counts the packets, the second those dropped
// (see lossCounters).
func (c *netnsCluster) loss(host string, pct int) {
	c.t.Helper()
	c.nft(c.ns[host], fmt.Sprintf(`table netdev gw {
	chain in { type filter hook ingress device %[1]q priority 0; counter; numgen random mod 100 < %[2]d counter drop; }
	chain out { type filter hook egress device %[1]q priority 0; counter; numgen random mod 100 < %[2]d counter drop; }
}
`, netnsNIC(host), pct))
}

var netnsCounterRE = regexp.MustCompile(`counter packets (\d+)`)

// lossCounters returns the packets seen and dropped by host's loss rules.
func (c *netnsCluster) lossCounters(host string) (seen, dropped int64) {
	c.t.Helper()
	out := c.must("ip", "netns", "exec", c.ns[host], "nft", "list", "table", "netdev", "gw")
	m := netnsCounterRE.FindAllStringSubmatch(out, -1)
	if len(m) != 4 {
		c.t.Fatalf("nft counters of %s: %q", host, out)
	}
	var v [4]int64
	for i := range m {
		v[i], _ = strconv.ParseInt(m[i][1], 10, 64)
	}
	return v[0] + v[2], v[1] + v[3]
}

// hosts lists the aggregator's host and every agent's.
func (c *netnsCluster) hosts() []string {
	out := []string{"agg"}
	for _, a := range c.agents {
		out = append(out, a.node)
	}
	return out
}

// countLogs counts the log lines of every process that contain sub.
func (c *netnsCluster) countLogs(sub string) int {
	n := 0
	for _, p := range append([]*proc{c.agg.proc}, agentProcs(c.agents)...) {
		n += strings.Count(p.logs.String(), sub)
	}
	return n
}

func agentProcs(as []*agent) []*proc {
	out := make([]*proc, len(as))
	for i, a := range as {
		out[i] = a.proc
	}
	return out
}

// declaredDead returns the members p's mesh declared dead ("member gone"
// in its log) after since, and when it declared the last of them.
func declaredDead(p *proc, since time.Time) (map[string]bool, time.Time) {
	gone := map[string]bool{}
	var last time.Time
	for _, line := range strings.Split(p.logs.String(), "\n") {
		if !strings.Contains(line, `"msg":"member gone"`) {
			continue
		}
		// An agent's lines carry its own "node" first, then the member's;
		// the last one wins.
		var rec struct {
			Time time.Time `json:"time"`
			Node string    `json:"node"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil || !rec.Time.After(since) {
			continue
		}
		gone[rec.Node] = true
		if rec.Time.After(last) {
			last = rec.Time
		}
	}
	return gone, last
}

// rejoined returns the members p's log says came back alive (from dead
// or left), or joined, after since.
func rejoined(p *proc, since time.Time) map[string]bool {
	back := map[string]bool{}
	for _, line := range strings.Split(p.logs.String(), "\n") {
		if !strings.Contains(line, `"msg":"member back"`) && !strings.Contains(line, `"msg":"member joined"`) {
			continue
		}
		var rec struct {
			Time time.Time `json:"time"`
			Node string    `json:"node"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Time.After(since) {
			back[rec.Node] = true
		}
	}
	return back
}

// netnsToken is the administrators' token of the netns clusters.
const netnsToken = "s3cret-token-for-tests"

// meshNode is a node of the view with the mesh's opinion of its agent.
type meshNode struct {
	node
	Member string `json:"member"`
}

// get returns the aggregator's view of one node, member status included.
func (c *netnsCluster) get(name string) (meshNode, error) {
	var n meshNode
	resp, err := http.Get(c.agg.url + "/v1/nodes/" + name)
	if err != nil {
		return n, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return n, fmt.Errorf("GET /v1/nodes/%s: %d %s", name, resp.StatusCode, body)
	}
	return n, json.Unmarshal(body, &n)
}

// waitMember polls (bounded) until the node's view satisfies cond.
func (c *netnsCluster) waitMember(name, what string, timeout time.Duration, cond func(meshNode) bool) meshNode {
	c.t.Helper()
	n, err, ok := testutil.PollRead(timeout, func() (meshNode, error) { return c.get(name) }, cond)
	if !ok {
		c.t.Fatalf("node %s not %s within %v (last: %+v, err %v)", name, what, timeout, n, err)
	}
	return n
}

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

// seen is one node state of the watch stream, stamped when it arrived.
type seen struct {
	At   time.Time
	ID   string
	Node meshNode
}

// recorder keeps every node state /v1/watch streams (the snapshot's and
// each change's) for the whole test.
type recorder struct {
	mu     sync.Mutex
	seen   []seen
	ended  bool
	badMsg string
	done   chan struct{}
}

func (c *netnsCluster) record() *recorder {
	c.t.Helper()
	w := c.agg.watch(c.t)
	r := &recorder{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		handle := func(ev event) {
			var ns []meshNode
			switch ev.Type {
			case "snapshot":
				var list struct {
					Nodes []meshNode `json:"nodes"`
				}
				if err := json.Unmarshal([]byte(ev.Data), &list); err != nil {
					r.fail(fmt.Sprintf("snapshot %q: %v", ev.Data, err))
				}
				ns = list.Nodes
			case "node":
				var n meshNode
				if err := json.Unmarshal([]byte(ev.Data), &n); err != nil {
					r.fail(fmt.Sprintf("event %q: %v", ev.Data, err))
				}
				ns = []meshNode{n}
			}
			r.mu.Lock()
			for _, n := range ns {
				r.seen = append(r.seen, seen{At: ev.At, ID: ev.ID, Node: n})
			}
			r.mu.Unlock()
		}
		for {
			select {
			case ev := <-w.events:
				handle(ev)
			case <-w.done:
				for {
					select {
					case ev := <-w.events:
						handle(ev)
					default:
						r.mu.Lock()
						r.ended = true
						r.mu.Unlock()
						return
					}
				}
			}
		}
	}()
	// Registered after watch's cleanup, so it runs first; it only waits
	// for the reader, which ends once watch's cleanup closes the stream.
	c.t.Cleanup(func() { w.cancel(); <-r.done })
	r.wait(c.t, "the snapshot", 10*time.Second, func(s seen) bool { return true })
	return r
}

func (r *recorder) fail(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.badMsg == "" {
		r.badMsg = msg
	}
}

// all returns what was recorded so far and fails the test if the stream
// ended or carried something undecodable.
func (r *recorder) all(t *testing.T) []seen {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.badMsg != "" {
		t.Fatal(r.badMsg)
	}
	if r.ended {
		t.Fatal("the /v1/watch stream ended during the test")
	}
	return append([]seen(nil), r.seen...)
}

// wait returns the first recorded state that satisfies cond, waiting
// (bounded) for it.
func (r *recorder) wait(t *testing.T, what string, timeout time.Duration, cond func(seen) bool) seen {
	t.Helper()
	var found seen
	if !testutil.Poll(timeout, func() bool {
		for _, s := range r.all(t) {
			if cond(s) {
				found = s
				return true
			}
		}
		return false
	}) {
		t.Fatalf("watch: no %s within %v", what, timeout)
	}
	return found
}

// bad returns the recorded states that are down or unreachable and not
// allowed by ok.
func (r *recorder) bad(t *testing.T, ok func(seen) bool) []seen {
	t.Helper()
	var out []seen
	for _, s := range r.all(t) {
		if (s.Node.State == "down" || s.Node.State == "unreachable") && !ok(s) {
			out = append(out, s)
		}
	}
	return out
}

// lasted says how long the node stayed in the state of s: until the next
// recorded state of that node that differs, or "still" if none.
func (r *recorder) lasted(t *testing.T, s seen) string {
	t.Helper()
	for _, x := range r.all(t) {
		if x.Node.Name == s.Node.Name && x.At.After(s.At) && x.Node.State != s.Node.State {
			return fmt.Sprintf("%v, then %s", x.At.Sub(s.At).Round(time.Millisecond), x.Node.State)
		}
	}
	return "the rest of the test"
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
