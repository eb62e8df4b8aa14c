package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/testutil"
	craft "github.com/gracewatch/gracewatch/internal/testutil/rogue"
)

// crashRecoveryBound is how soon after its restart an aggregator killed
// with SIGKILL must serve every idle node up again. The agents learn of
// the new process from its first ack (a probe round: about a second per
// member), so this leaves room for a squeezed machine; without the
// restart's detection the view stayed empty for minutes (until each
// node's state happened to change).
const crashRecoveryBound = 15 * time.Second

// crashCluster is the cluster both crash tests start from: the aggregator
// agg-1 and the agents n1 to n3, served up.
func crashCluster(t *testing.T) (*cluster, *aggregator) {
	t.Helper()
	c := newCluster(t)
	agg := c.addAggregator("agg-1")
	for _, n := range []string{"n1", "n2", "n3"} {
		c.addAgent(n)
	}
	c.waitAllUp(t, agg)
	return c, agg
}

// An aggregator killed with SIGKILL (a crash, an OOM kill, a power cut:
// no signed leave) and restarted at once with the same configuration is
// a new process that has none of the nodes' states, while memberlist on
// the agents never saw it die. With node restriction a node enters its
// view only with a proven update from the node: the agents must see that
// the aggregator they send to is a new process, and send it their state.
func TestAggregatorCrashRecovery(t *testing.T) {
	c, agg := crashCluster(t)

	// not a wait: the scenario is a cluster that has been idle for a while,
	// the gossip of the members' joins died down; a crash in the middle
	// of it is another test (the joins' own broadcasts would bring the
	// agents the new process).
	time.Sleep(5 * time.Second)

	// This test is the agents' side: that they see the new process and
	// send it their state. The restarted aggregator would ask them first
	// (TestAggregatorCrashRecoveryAfterFlood): what it kept of where they
	// are is removed before it starts again.
	if err := os.Remove(filepath.Join(c.dir, "agg-1-state", "reach")); err != nil {
		t.Fatal(err)
	}
	crashAndRecover(t, c, agg)
	for _, a := range c.agents {
		var seen []string
		for _, line := range strings.Split(a.logs.String(), "\n") {
			if strings.Contains(line, "aggregator restarted") || strings.Contains(line, "restarted aggregator") {
				seen = append(seen, line)
			}
		}
		if len(seen) == 0 {
			t.Errorf("%s: no log line of the aggregator's restart", a.node)
		}
		t.Logf("%s:\n%s", a.node, strings.Join(seen, "\n"))
	}
	if logged(agg.proc, "Refuting an alive message") {
		t.Log("the restarted aggregator refuted its previous life")
	}
}

// crashAndRecover kills agg with SIGKILL, restarts it with the same
// configuration, and fails unless every agent of c is served up within
// crashRecoveryBound of the restart.
func crashAndRecover(t *testing.T, c *cluster, agg *aggregator) {
	t.Helper()
	pid := agg.cmd.Process.Pid
	agg.crash() // SIGKILL by its pid, and reaped
	t.Logf("aggregator (pid %d) killed with SIGKILL", pid)
	agg.start()
	restarted := time.Now()
	agg.waitReady()

	allUp := func(ns []node) bool {
		up := 0
		for _, n := range ns {
			if n.State == "up" {
				up++
			}
		}
		return up == len(c.agents)
	}
	last, err, ok := testutil.PollRead(crashRecoveryBound, func() ([]node, error) { return fetchNodes(agg.url + "/v1/nodes") }, allUp)
	took := time.Since(restarted)
	if !ok {
		t.Fatalf("%v after its restart the aggregator serves %q (%v), want every node up within %v",
			took.Round(time.Millisecond), states(last), err, crashRecoveryBound)
	}
	t.Logf("every node served up %v after the aggregator's restart: %s", took.Round(time.Millisecond), states(last))
}

// The same crash after a flood of invented members (root on one node
// with the mesh key): the agents' member tables hold thousands of names,
// so a probe round of theirs, which would show them the new process, takes
// hours. The restarted aggregator asks the nodes it knew, at the addresses
// they proved (aggregator/reach.go), and serves every one of them again
// within the same bound.
func TestAggregatorCrashRecoveryAfterFlood(t *testing.T) {
	c, agg := crashCluster(t)
	r := c.crafter(t)
	targets := []string{c.seeds[0]}
	for _, a := range c.agents {
		targets = append(targets, meshAddr(t, a.config))
	}
	const invented = 8000
	for i := 0; i < invented; i += 100 {
		var msgs [][]byte
		for j := i; j < i+100; j++ {
			msgs = append(msgs, craft.Alive(fmt.Sprintf("ghost%05d", j), fmt.Sprintf("127.3.%d.%d:7946", j/250, 1+j%250), 1, nil))
		}
		for _, to := range targets {
			if err := r.Send(to, craft.Compound(msgs...)); err != nil {
				t.Fatal(err)
			}
		}
		if (i/100)%10 == 9 {
			// memberlist drops what its queue has no room for: a
			// thousand at a time, each batch handled before the next.
			flushAlives(t, r, c.seeds[0], agg)
		}
	}
	flushAlives(t, r, c.seeds[0], agg)
	n := metric(t, agg, "gracewatch_mesh_members")
	t.Logf("the aggregator holds %.0f members after the flood of %d", n, invented)
	if n < invented/2 {
		t.Fatalf("the aggregator holds %.0f members after the flood, want most of the %d invented ones", n, invented)
	}
	// What the aggregator keeps of where the nodes are (rewritten at
	// most every 2 s): every node is in it before the crash.
	reach := filepath.Join(c.dir, "agg-1-state", "reach")
	testutil.Eventually(t, 30*time.Second, "the aggregator's reach file to name every node", func() bool {
		b, _ := os.ReadFile(reach)
		for _, a := range c.agents {
			if !strings.Contains(string(b), a.node+" ") {
				return false
			}
		}
		return true
	})
	crashAndRecover(t, c, agg)
	if !logged(agg.proc, "asked the nodes of the last run for their state") {
		t.Error("the restarted aggregator does not say it asked the nodes it knew")
	}
}
