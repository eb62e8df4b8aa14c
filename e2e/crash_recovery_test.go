package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// crashRecoveryBound is how soon after its restart an aggregator killed
// with SIGKILL must serve every idle node up again. The agents learn of
// the new process from its first ack (a probe round: about a second per
// member), so this leaves room for a squeezed machine; without the
// restart's detection the view stayed empty for minutes (until each
// node's state happened to change).
const crashRecoveryBound = 15 * time.Second

// An aggregator killed with SIGKILL (a crash, an OOM kill, a power cut:
// no signed leave) and restarted at once with the same configuration is
// a new process that has none of the nodes' states, while memberlist on
// the agents never saw it die. With node restriction a node enters its
// view only with a proven update from the node: the agents must see that
// the aggregator they send to is a new process, and send it their state.
func TestAggregatorCrashRecovery(t *testing.T) {
	c := newCluster(t)
	agg := c.addAggregator("agg-1")
	for _, n := range []string{"n1", "n2", "n3"} {
		c.addAgent(n)
	}
	for _, a := range c.agents {
		agg.waitNode(t, a.node, "up", 15*time.Second, func(n node) bool { return n.State == "up" })
	}

	// not a wait: the scenario is a cluster that has been idle for a while,
	// the gossip of the members' joins died down; a crash in the middle
	// of it is another test (the joins' own broadcasts would bring the
	// agents the new process).
	time.Sleep(5 * time.Second)

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
