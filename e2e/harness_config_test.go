package e2e

// What the cluster's processes are configured with: loopback addresses and
// free ports, the agents' configuration file, and the node restriction's keys
// (siteKeys).

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

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

func tomlList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = fmt.Sprintf("%q", x)
	}
	return "[" + strings.Join(q, ", ") + "]"
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
