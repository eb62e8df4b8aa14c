package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// waitAllUp waits until each of aggs serves every agent of c up (at most
// 15 s a node).
func (c *cluster) waitAllUp(t testing.TB, aggs ...*aggregator) {
	t.Helper()
	for _, g := range aggs {
		for _, a := range c.agents {
			g.waitNode(t, a.node, "up", 15*time.Second, func(n node) bool { return n.State == "up" })
		}
	}
}

// TestCluster runs one mesh of two aggregators and three agents on loopback
// through the cases a site meets, in order: a hung epilogue, a resume, an
// agent killed and restarted, an agent frozen during a teardown, and an
// aggregator restart. Both aggregators run a Slurm-style actuator (a script
// appending to a file); only the leader may run it, once per transition.
func TestCluster(t *testing.T) {
	c := newCluster(t)
	actions := filepath.Join(c.dir, "actions.log")
	c.aggConf = actuatorLog(actions)
	agg1 := c.addAggregator("agg-1")
	agg2 := c.addAggregator("agg-2")
	n1, n2, n3 := c.addAgent("n1"), c.addAgent("n2"), c.addAgent("n3")
	c.waitAllUp(t, c.aggs...)

	t.Run("hung epilogue: teardown with free_at = D, then down within 1 s of D", func(t *testing.T) {
		w := agg1.watch(t)
		if _, code := n1.cli("job", "start", "--job", "201", "--expiration", time.Now().Add(time.Hour).Format(time.RFC3339)); code != 0 {
			t.Fatal("job start failed")
		}
		n1.epilog("201", "sh", "-c", "trap '' TERM; exec sleep 300")
		td, _ := w.next(t, "n1", "teardown", 10*time.Second)
		st := n1.status()
		if len(st.Jobs) != 1 || st.Jobs[0].Deadline == nil {
			t.Fatalf("agent status %+v", st)
		}
		d := *st.Jobs[0].Deadline
		if td.FreeAt == nil || td.FreeAt.UnixMilli() != d.UnixMilli() {
			t.Fatalf("served free_at %v, agent's deadline %v", td.FreeAt, d)
		}
		down, ev := w.next(t, "n1", "down", 10*time.Second)
		late := ev.At.Sub(d)
		if late > time.Second || late < 0 {
			t.Fatalf("down seen %v after the deadline (want within 1 s)", late)
		}
		t.Logf("down seen by a /v1/watch client %v after D", late.Round(time.Millisecond))
		// The agent latches at D once its first snapshot is in, so the very
		// first DOWN already names what is hung.
		if !strings.Contains(down.Reason, "job 201 teardown exceeded grace 3s") || !strings.Contains(down.Reason, "sleep") {
			t.Fatalf("reason %q does not carry the agent's diagnosis", down.Reason)
		}
		for _, other := range []string{"n2", "n3"} {
			if n, _ := agg1.node(t, other); n.State != "up" {
				t.Fatalf("%s is %s, want up", other, n.State)
			}
		}
		agg2.waitNode(t, "n1", "down", 5*time.Second, func(n node) bool { return n.State == "down" })
	})

	t.Run("resume through the aggregator clears the agent's latch everywhere", func(t *testing.T) {
		if code, body := agg2.post(t, "/v1/nodes/n1/resume", "", `{"reason":"x"}`); code != 401 {
			t.Fatalf("resume without a token: %d %s", code, body)
		}
		if code, body := agg2.post(t, "/v1/nodes/n1/resume", c.token, `{"reason":"epilogue fixed"}`); code != 200 {
			t.Fatalf("resume: %d %s", code, body)
		}
		if st := n1.status(); st.State == "down" {
			t.Fatalf("agent still down after resume: %q", st.Reason)
		}
		for _, g := range c.aggs {
			g.waitNode(t, "n1", "up", 5*time.Second, func(n node) bool { return n.State == "up" })
		}
	})

	t.Run("kill -9 of an agent: unreachable, then up after restart", func(t *testing.T) {
		n2.crash()
		start := time.Now()
		agg1.waitNode(t, "n2", "unreachable", 20*time.Second, func(n node) bool { return n.State == "unreachable" })
		t.Logf("n2 unreachable %v after kill -9", time.Since(start).Round(time.Millisecond))
		n2.start()
		n2.waitAPI()
		for _, g := range c.aggs {
			g.waitNode(t, "n2", "up", 20*time.Second, func(n node) bool { return n.State == "up" })
		}
	})

	t.Run("frozen agent during a teardown: down at D + allowance by central enforcement", func(t *testing.T) {
		if _, code := n3.cli("job", "start", "--job", "301", "--expiration", time.Now().Add(time.Hour).Format(time.RFC3339)); code != 0 {
			t.Fatal("job start failed")
		}
		n3.epilog("301", "sleep", "300")
		agg1.waitNode(t, "n3", "teardown", 10*time.Second, func(n node) bool { return n.State == "teardown" })
		d := *n3.status().Jobs[0].Deadline
		defer n3.cmd.Process.Signal(syscall.SIGCONT)
		testutil.Freeze(t, n3.cmd.Process.Pid)
		n := agg1.waitNode(t, "n3", "down", time.Until(d)+5*time.Second, func(n node) bool { return n.State == "down" })
		if late := time.Since(d); late > 3*time.Second {
			t.Fatalf("down %v after D (allowance 1 s)", late)
		}
		if !strings.Contains(n.Reason, "no report after teardown deadline") {
			t.Fatalf("reason %q", n.Reason)
		}
		n3.cmd.Process.Signal(syscall.SIGCONT)
		// Thawed, the agent itself enforces and reports its own DOWN.
		agg1.waitNode(t, "n3", "down with the agent's reason", 10*time.Second, func(n node) bool {
			return n.State == "down" && strings.Contains(n.Reason, "job 301")
		})
	})

	// Where the logs of the restart begin.
	var marks map[*aggregator]int
	t.Run("restarted aggregator has the full view within 5 s", func(t *testing.T) {
		want := states(agg2.nodes(t, ""))
		marks = map[*aggregator]int{agg1: len(agg1.logs.String()), agg2: len(agg2.logs.String())}
		agg1.stop()
		agg1.start()
		start := time.Now()
		// The bound is what this case asserts, not a wait for an event.
		got, err, ok := testutil.PollRead(5*time.Second, func() (string, error) { return tryStates(agg1) },
			func(got string) bool { return got == want })
		if !ok {
			t.Fatalf("after 5 s the restarted aggregator serves %q (err %v), want %q", got, err, want)
		}
		t.Logf("view back %v after restart: %s", time.Since(start).Round(time.Millisecond), got)
	})

	t.Run("two aggregators serve the same states; the actuator ran once per transition", func(t *testing.T) {
		if a, b := states(agg1.nodes(t, "")), states(agg2.nodes(t, "")); a != b {
			t.Fatalf("agg-1 %q, agg-2 %q", a, b)
		}
		// Let any late actuator run land: the restarted agg-1 decides on
		// the nodes it has just come to know once its settle has passed
		// (it logs each after its actuators heard of it), and leads again
		// (the alive aggregator with the lowest name); agg-2 may have led
		// while agg-1 was away. A run either started is over once each has
		// logged the end of every actuation it began.
		var names []string
		for _, n := range agg1.nodes(t, "") {
			names = append(names, n.Name)
		}
		testutil.Eventually(t, 60*time.Second, "agg-1's settle over "+strings.Join(names, ", "), func() bool {
			for _, name := range names {
				if linesSince(agg1.proc, marks[agg1], `"msg":"settle over: the actuators decide on the node"`, `"node":"`+name+`"`) == 0 {
					return false
				}
			}
			return true
		})
		for _, g := range c.aggs {
			var seen string
			if !testutil.Poll(60*time.Second, func() bool {
				var idle bool
				idle, seen = actuatorsIdle(g, marks[g], g == agg1)
				return idle
			}) {
				t.Fatalf("%s: actuations still under way since the restart: %s", g.name, seen)
			}
		}
		data, _ := os.ReadFile(actions)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		count := map[string]int{}
		for _, l := range lines {
			f := strings.Fields(l)
			if len(f) >= 2 {
				count[f[0]+" "+f[1]]++
			}
		}
		// n1: down (hung), up (resumed); n3: down (central), and the agent's
		// own down afterwards is the same state, not a new transition.
		want := map[string]int{"down n1": 1, "up n1": 1, "down n3": 1}
		for k, v := range want {
			if count[k] != v {
				t.Fatalf("actuator runs %v (from %q), want %v", count, data, want)
			}
		}
		if len(count) != len(want) {
			t.Fatalf("unexpected actuator runs %v", count)
		}
	})

	t.Run("kill -9 of a latched agent: unreachable, then still down after restart", func(t *testing.T) {
		n3.crash()
		agg2.waitNode(t, "n3", "unreachable", 20*time.Second, func(n node) bool { return n.State == "unreachable" })
		n3.start()
		n3.waitAPI()
		n := agg2.waitNode(t, "n3", "down again", 20*time.Second, func(n node) bool { return n.State == "down" })
		if !strings.Contains(n.Reason, "job 301") {
			t.Fatalf("reason after restart %q, want the latched violation", n.Reason)
		}
		if st := n3.status(); st.State != "down" {
			t.Fatalf("agent state after restart %s", st.State)
		}
	})
}

func states(ns []node) string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Name+"="+n.State)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func tryStates(g *aggregator) (string, error) {
	ns, err := fetchNodes(g.url + "/v1/nodes")
	if err != nil {
		return "", err
	}
	return states(ns), nil
}

func execOut(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

// TestGossipNeedsKeyAndLabel: an agent with another key, or another label,
// never joins; one with the right ones does.
func TestGossipNeedsKeyAndLabel(t *testing.T) {
	c := newCluster(t)
	agg := c.addAggregator("agg-1")
	good := c.addAgent("good")
	agg.waitNode(t, good.node, "up", 15*time.Second, func(n node) bool { return n.State == "up" })

	otherKey := filepath.Join(c.dir, "other.key")
	if out, err := execOut(bins.aggregator, "keygen", otherKey); err != nil {
		t.Fatalf("keygen: %v %s", err, out)
	}
	key := c.keyfile
	c.keyfile = otherKey
	wrongKey := c.addAgent("wrongkey")
	c.keyfile = key
	label := c.label
	c.label = "another-cluster"
	wrongLabel := c.addAgent("wronglabel")
	c.label = label

	// Not a window of time that passes as well when they never started:
	// each has tried to join the aggregator and been refused.
	for _, a := range []*agent{wrongKey, wrongLabel} {
		testutil.Eventually(t, 20*time.Second, a.node+" refused by the seed", func() bool {
			return a.running() && strings.Contains(a.logs.String(), "cannot join any seed")
		})
	}
	for _, name := range []string{"wrongkey", "wronglabel"} {
		if n, ok := agg.node(t, name); ok {
			t.Fatalf("%s joined the mesh: %+v", name, n)
		}
	}
	if n, ok := agg.node(t, "good"); !ok || n.State != "up" {
		t.Fatalf("the good agent is gone: %+v", n)
	}
}

// TestLateAggregatorKnowsGoneNodes: memberlist forgets a dead member
// GossipToTheDeadTime (30 s) after its death, so an aggregator started
// later learns of a node that died before it came only from another
// aggregator's handover. Both must then serve it the same.
func TestLateAggregatorKnowsGoneNodes(t *testing.T) {
	c := newCluster(t)
	agg1 := c.addAggregator("agg-1")
	c.addAgent("n1")
	n2 := c.addAgent("n2")
	c.waitAllUp(t, agg1)
	n2.crash()
	gone := agg1.waitNode(t, "n2", "unreachable", 20*time.Second, func(n node) bool { return n.State == "unreachable" })
	// A member that joins later learns from memberlist's push-pull only of
	// members its peers hold alive: a dead or suspect member it has never
	// seen is ignored (memberlist's mergeState). So once every live member
	// holds n2 dead (agg-1 serves it unreachable; n1 logs it gone), agg-2
	// can learn of n2 only from agg-1's handover, whether or not
	// GossipToTheDeadTime has passed.
	n1 := c.agents[0]
	testutil.Eventually(t, 20*time.Second, "n1 holding n2 dead", func() bool {
		return logged(n1.proc, `"msg":"member gone"`, `"node":"n2"`, `"status":"dead"`)
	})

	agg2 := c.addAggregator("agg-2")
	start := time.Now()
	want := states(agg1.nodes(t, ""))
	got, err, ok := testutil.PollRead(60*time.Second, func() (string, error) { return tryStates(agg2) },
		func(got string) bool { return got == want })
	if !ok {
		t.Fatalf("the late aggregator serves %q (err %v) after %v, want %q as the first one", got, err, time.Since(start).Round(time.Millisecond), want)
	}
	t.Logf("late aggregator serves %s %v after it started", got, time.Since(start).Round(time.Millisecond))
	late := agg2.waitNode(t, "n2", "unreachable", time.Second, func(n node) bool { return n.State == "unreachable" })
	if late.Reason != gone.Reason || !late.Since.Equal(gone.Since) {
		t.Fatalf("n2 on the late aggregator: %q since %v; on the first: %q since %v", late.Reason, late.Since, gone.Reason, gone.Since)
	}

	// n2 was decommissioned: forgotten through one aggregator, by the CLI,
	// it leaves both views.
	out, err := execOut(bins.aggregator, "forget", "n2", "--reason", "decommissioned",
		"--url", agg1.url, "--token-file", filepath.Join(c.dir, "token"))
	if err != nil || !strings.Contains(out, "n2 forgotten") {
		t.Fatalf("aggregator forget: %v\n%s", err, out)
	}
	for _, g := range []*aggregator{agg1, agg2} {
		var last node
		if !testutil.Poll(30*time.Second, func() bool {
			n, ok := g.node(t, "n2")
			last = n
			return !ok
		}) {
			t.Fatalf("%s still serves n2 30 s after the forget: %+v", g.url, last)
		}
	}
	if out, err := execOut(bins.aggregator, "forget", "n1", "--reason", "x",
		"--url", agg1.url, "--token-file", filepath.Join(c.dir, "token")); err == nil || !strings.Contains(out, "409") && !strings.Contains(out, "alive") {
		t.Fatalf("forget of a live node: %v\n%s", err, out)
	}
}

// linesSince counts the lines of p's log after its first mark bytes that
// hold every part.
func linesSince(p *proc, mark int, parts ...string) int {
	n := 0
	for _, line := range strings.Split(p.logs.String()[mark:], "\n") {
		all := true
		for _, part := range parts {
			all = all && strings.Contains(line, part)
		}
		if all {
			n++
		}
	}
	return n
}

// actuatorsIdle reports whether g's actuators have ended every actuation
// they began after the first mark bytes of its log (they log both at debug
// level), and g's last word on leadership since, if any, is that it leads
// when lead, that it does not otherwise: then no run of g's is under way,
// and none is to come from a change of leadership. It says what it
// counted.
func actuatorsIdle(g *aggregator, mark int, lead bool) (bool, string) {
	began := linesSince(g.proc, mark, `"msg":"actuating"`)
	ended := linesSince(g.proc, mark, `"msg":"actuated: nothing more to run for the node"`)
	leads, said := false, false
	for _, line := range strings.Split(g.logs.String()[mark:], "\n") {
		if strings.Contains(line, `"msg":"actuator leadership"`) {
			leads, said = strings.Contains(line, `"self":true`), true
		}
	}
	idle := began == ended && (said && leads == lead || !said && !lead)
	return idle, fmt.Sprintf("%d actuations begun, %d ended; said it leads: %t (%t)", began, ended, leads, said)
}

// logged reports whether one line of p's log holds every part.
func logged(p *proc, parts ...string) bool { return p.logs.HasLine(parts...) }
