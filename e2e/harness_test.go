// Package e2e holds cluster tests: real nodeagent and aggregator processes
// joined in a real memberlist mesh on loopback, real cgroups and processes,
// driven through their CLIs and HTTP APIs as a scheduler and an
// administrator would.
package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
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

// freePort returns a port of 127.0.0.1 free for both TCP and UDP
// (memberlist uses both on the same number).
func freePort(t testing.TB) int { return freePortOn(t, "127.0.0.1") }

// agentIPs counts the loopback addresses given to agents (agentIP).
var agentIPs atomic.Uint32

// agentIP returns a loopback address of an agent's own, 127.0.100.1 on,
// as each node has its own IP: the aggregator's per-peer stream bound
// counts source addresses, and 30 agents all at 127.0.0.1 were one peer
// to it.
func agentIP() string {
	i := agentIPs.Add(1) - 1
	return fmt.Sprintf("127.0.%d.%d", 100+(i/250)%150, 1+i%250)
}

// agentBind returns an agent's mesh bind address: its own IP and a free
// port.
func agentBind(t testing.TB) string {
	ip := agentIP()
	return net.JoinHostPort(ip, strconv.Itoa(freePortOn(t, ip)))
}

// freePortOn returns a port of ip free for both TCP and UDP.
func freePortOn(t testing.TB, ip string) int {
	t.Helper()
	for i := 0; i < 50; i++ {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", net.JoinHostPort(ip, strconv.Itoa(port)))
		l.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// proc is a gracewatch process under test, ended by its pid.
type proc struct {
	t    testing.TB
	name string
	args []string
	cmd  *exec.Cmd
	logs *testutil.SyncBuffer
}

func (p *proc) start() {
	p.t.Helper()
	p.cmd = exec.Command(p.args[0], p.args[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
}

func (p *proc) running() bool { return p.cmd != nil && p.cmd.ProcessState == nil }

// stop sends SIGTERM (SIGCONT first, in case the test froze it), then
// SIGKILL after 5 s.
func (p *proc) stop() {
	if !p.running() {
		return
	}
	testutil.Stop(p.cmd, 5*time.Second)
}

func (p *proc) crash() {
	p.cmd.Process.Kill()
	p.cmd.Wait()
}

func (p *proc) dumpIfFailed() {
	if p.t.Failed() {
		p.t.Logf("=== logs of %s:\n%s", p.name, trimLog(p.logs.String(), strings.HasPrefix(p.name, "agg")))
	}
}

// memberlistNoise are log lines of every member about every other: the
// first to go when a failed test's log is trimmed.
var memberlistNoise = []string{`"msg":"member joined"`, `"msg":"member gone"`, `push/pull sync`, `"msg":"Stream connection`}

// trimLog keeps the end of a process's log for a failed test's output: up
// to 20 kB of an agent's, 200 kB of an aggregator's (what it decided about
// every node is what a failure of a large cluster test is read from), the
// mesh's membership lines dropped first.
func trimLog(logs string, aggregator bool) string {
	limit := 20000
	if aggregator {
		limit = 200000
	}
	if len(logs) <= limit {
		return logs
	}
	var kept []string
	dropped := 0
	for _, line := range strings.Split(logs, "\n") {
		if slices.ContainsFunc(memberlistNoise, func(n string) bool { return strings.Contains(line, n) }) {
			dropped++
			continue
		}
		kept = append(kept, line)
	}
	logs = strings.Join(kept, "\n")
	if len(logs) > limit {
		logs = "...\n" + logs[len(logs)-limit:]
	}
	return fmt.Sprintf("(%d membership lines left out)\n%s", dropped, logs)
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

func tomlList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = fmt.Sprintf("%q", x)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// node is the aggregator's view of one node (GET /v1/nodes/{name}).
type node struct {
	Name        string     `json:"name"`
	State       string     `json:"state"`
	Reason      string     `json:"reason"`
	Since       time.Time  `json:"since"`
	FreeAt      *time.Time `json:"free_at"`
	Schedulable bool       `json:"schedulable"`
}

func (g *aggregator) nodes(t testing.TB, query string) []node {
	t.Helper()
	ns, err := fetchNodes(g.url + "/v1/nodes" + query)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func fetchNodes(url string) ([]node, error) {
	var out struct {
		Nodes []node `json:"nodes"`
	}
	_, err := getJSON(url, "", &out)
	return out.Nodes, err
}

func (g *aggregator) node(t testing.TB, name string) (node, bool) {
	for _, n := range g.nodes(t, "") {
		if n.Name == name {
			return n, true
		}
	}
	return node{}, false
}

// waitNode polls the aggregator (bounded) until the node satisfies cond.
func (g *aggregator) waitNode(t testing.TB, name, what string, timeout time.Duration, cond func(node) bool) node {
	t.Helper()
	n, err, ok := testutil.PollRead(timeout, func() (node, error) {
		n, known := g.node(t, name)
		if !known {
			return n, errors.New("not known")
		}
		return n, nil
	}, cond)
	if !ok {
		t.Fatalf("%s: node %s not %s within %v (last: %+v, %v)", g.name, name, what, timeout, n, err)
	}
	return n
}

// loopRound returns once g's main loop has processed everything queued
// before the call (a message a member handed it, a timer's tick) and
// recomputed the view from it: the proof that what a test sent was taken
// or left, with no time allowed for it. A forget of a node g does not know
// changes nothing and is answered from the loop in the order of its queue,
// before that batch's recomputation; the second of two is queued after the
// first was answered, so it is answered once the batch that held the first
// (and everything queued before it) is done.
func (g *aggregator) loopRound(t testing.TB, token string) {
	t.Helper()
	for range 2 {
		if code, body := g.post(t, "/v1/nodes/"+unknownNode+"/forget", token, `{"reason":"a round of the loop"}`); code != http.StatusNotFound {
			t.Fatalf("%s: forget of %s, a node it does not know: %d %s, want 404", g.name, unknownNode, code, body)
		}
	}
}

// unknownNode is a node name no test's cluster has (loopRound).
const unknownNode = "no-such-node"

func (g *aggregator) post(t testing.TB, path, token, body string) (int, string) {
	t.Helper()
	code, b, err := call("POST", g.url+path, token, body)
	if err != nil {
		t.Fatal(err)
	}
	return code, string(b)
}

// call makes one HTTP request (a body, other than a GET's, as JSON; the bearer token
// unless empty) and returns the status and the body.
func call(method, url, token, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if method != "GET" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, b, fmt.Errorf("%s %s: %w", method, url, err)
	}
	return resp.StatusCode, b, nil
}

// getJSON GETs url (with the token unless empty) and decodes its 200 answer
// into v. It returns the body, and an error naming the URL unless the answer
// was a 200 that decodes.
func getJSON(url, token string, v any) ([]byte, error) {
	code, body, err := call("GET", url, token, "")
	if err != nil {
		return body, err
	}
	if code != 200 {
		return body, fmt.Errorf("GET %s: %d %s", url, code, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return body, fmt.Errorf("GET %s: %v\n%s", url, err, body)
	}
	return body, nil
}

// event is one Server-Sent Event of /v1/watch, stamped when it arrived.
type event struct {
	ID   string
	Type string
	Data string
	At   time.Time
}

// watcher follows /v1/watch in the background.
type watcher struct {
	cancel context.CancelFunc
	events chan event
	done   chan struct{}
}

func (g *aggregator) watch(t testing.TB) *watcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", g.url+"/v1/watch", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("watch: %v", err)
	}
	w := &watcher{cancel: cancel, events: make(chan event, 4096), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer resp.Body.Close()
		err := testutil.ReadSSE(resp.Body, func(e testutil.SSEEvent) {
			if e.Event == "" && e.Data == "" {
				return // a heartbeat: a comment alone
			}
			select {
			case w.events <- event{ID: e.ID, Type: e.Event, Data: e.Data, At: time.Now()}:
			default:
			}
		})
		if errors.Is(err, testutil.ErrSSEField) {
			t.Error(err)
		}
	}()
	t.Cleanup(func() { cancel(); <-w.done })
	return w
}

// next returns the next event about node whose state is state (other
// events are skipped), or fails after timeout.
func (w *watcher) next(t testing.TB, name, state string, timeout time.Duration) (node, event) {
	t.Helper()
	return w.nextWhere(t, fmt.Sprintf("no %s event for %s", state, name), timeout, func(n node) bool {
		return n.Name == name && n.State == state
	})
}

// nextWhere returns the next node event whose node match accepts (other
// events are skipped), or fails with "NONE within TIMEOUT" after timeout.
func (w *watcher) nextWhere(t testing.TB, none string, timeout time.Duration, match func(node) bool) (node, event) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev := <-w.events:
			if ev.Type != "node" {
				continue
			}
			var n node
			if err := json.Unmarshal([]byte(ev.Data), &n); err != nil {
				t.Fatalf("watch event %q: %v", ev.Data, err)
			}
			if match(n) {
				return n, ev
			}
		case <-deadline:
			t.Fatalf("%s within %v", none, timeout)
		}
	}
}

// agentKeys is the key lines of node's [mesh] table.
func (c *cluster) agentKeys(node string) string {
	if c.keyless[node] {
		return "allow_unsigned = true"
	}
	return fmt.Sprintf("node_key_file = %q\naggregator_keys_file = %q", c.keys.nodeKey(node), c.keys.public)
}

// siteKeys is a cluster's node restriction, provisioned as an administrator
// does it: a site key for the aggregators, then with the aggregator's own
// commands the public keys every node gets and each node's key.
type siteKeys struct {
	t      testing.TB
	dir    string
	site   string // the site key file
	conf   string // a configuration naming it, for the commands
	public string // the aggregators' public keys
}

func newSiteKeys(t testing.TB, dir string) *siteKeys {
	t.Helper()
	k := &siteKeys{t: t, dir: dir, site: filepath.Join(dir, "site.key"), conf: filepath.Join(dir, "keys.toml"), public: filepath.Join(dir, "aggregators.pub")}
	if out, err := exec.Command(bins.aggregator, "site-key", k.site).CombinedOutput(); err != nil {
		t.Fatalf("site-key: %v %s", err, out)
	}
	if err := os.WriteFile(k.conf, []byte(fmt.Sprintf("[mesh]\ninsecure = true\nsite_key_file = %q\n", k.site)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bins.aggregator, "public-key", "--config", k.conf).Output()
	if err != nil {
		t.Fatalf("public-key: %v", err)
	}
	if err := os.WriteFile(k.public, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return k
}

// nodeKey writes node's key (once) and returns its file.
func (k *siteKeys) nodeKey(node string) string {
	k.t.Helper()
	p := filepath.Join(k.dir, node+".node.key")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	if out, err := exec.Command(bins.aggregator, "node-key", node, "--out", p, "--config", k.conf).CombinedOutput(); err != nil {
		k.t.Fatalf("node-key %s: %v %s", node, err, out)
	}
	return p
}

// agentConfig is what the tests' agents' configuration files differ in.
type agentConfig struct {
	node, dir, socket, root string
	// grace, kill_wait, unkillable_after, and more [teardown] lines.
	grace, killWait, unkillableAfter, teardown string
	bind                                       string
	join                                       []string
	label, keyring                             string
	keys                                       string // the [mesh] key lines (agentKeys)
}

// text is the agent's configuration file (state in dir/state, a 200 ms
// diagnostics sample, a 2 s mesh rejoin, JSON logs at debug level).
func (a agentConfig) text() string {
	return testutil.AgentConfig{Node: a.node, StateDir: filepath.Join(a.dir, "state"), Socket: a.socket, CgroupRoot: a.root,
		Grace: a.grace, KillWait: a.killWait, UnkillableAfter: a.unkillableAfter, Teardown: a.teardown,
		SampleInterval: "200ms",
		Sections: fmt.Sprintf(`[mesh]
enabled = true
bind = %q
join = %s
label = %q
keyring = %q
%s
rejoin_interval = "2s"
`, a.bind, tomlList(a.join), a.label, a.keyring, a.keys)}.Text()
}

// schedNode is a node's state and reason as a scheduler's own tool shows
// them (Slurm's scontrol, Flux's resource status).
type schedNode struct{ state, reason string }

// pollSchedNode reads a node's state and reason with read (at most
// timeout, testutil.PollRead) until cond holds of them; it returns the
// last read, whether cond held, and the last read's error.
func pollSchedNode(timeout time.Duration, read func() (state, reason string, err error),
	cond func(state, reason string) bool) (schedNode, bool, error) {
	last, err, ok := testutil.PollRead(timeout, func() (schedNode, error) {
		state, reason, err := read()
		return schedNode{state, reason}, err
	}, func(n schedNode) bool { return cond(n.state, n.reason) })
	return last, ok, err
}
