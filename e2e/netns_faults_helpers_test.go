package e2e

// The netns tests' network faults: nftables tables in a host's namespace that
// cut its link or drop a share of its packets, and the probe for the netdev
// hooks they need.

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

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
