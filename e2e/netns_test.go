package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// The netns tests run an aggregator and five agents on several "hosts":
// each process in a network namespace of its own, joined by veth pairs to a
// bridge in the aggregator's namespace (netns_helpers_test.go), with the
// memberlist LAN profile the programs use (probe 1 s, suspicion mult 4,
// GossipToTheDeadTime 30 s, push-pull 30 s), rejoin_interval 2 s, grace 3 s
// and clock_skew_allowance 1 s (unreachable_after keeps its default, 2 s).
// Faults are nftables rules inside a host's namespace. They need root, ip
// (iproute2), nft (nftables with the netdev egress hook, Linux 5.16) and
// nsenter (util-linux); without them they skip, and fail when CI=true.

// gossipToTheDead is memberlist's GossipToTheDeadTime in the LAN profile:
// how long a dead member is remembered (and its death gossiped) before it
// is forgotten. A cut-off host is healed this long, plus a margin, after the
// aggregator served it unreachable, so the aggregator and the healthy side
// have forgotten it and only the rejoin loop can merge it back.
const gossipToTheDead = 30 * time.Second

// maxDetection bounds the time from a cut to the node served unreachable:
// memberlist's longest suspicion in the LAN profile at six members
// (SuspicionMaxTimeoutMult 6 × SuspicionMult 4 × log10(6) × probe 1 s, about
// 18.7 s, when no other member confirms it), a probe round before it (1.5 s),
// the aggregator's unreachable_after (2 s) and a margin for a loaded
// machine. Measured: 7.5–12.5 s (BENCHMARKS.md, "Faults").
const maxDetection = 27 * time.Second

// maxMerge bounds the time from a heal to the node merged back. A cut-off
// agent that declared the aggregator dead rejoins it with its rejoin loop;
// one that still holds the aggregator alive or suspect has no seed to
// rejoin, and the aggregator rejoins it instead (mesh.rejoinDead, the
// aggregator's rejoin loop). Either loop runs every rejoin_interval (2 s ±
// 20 %), and an attempt that started during the cut waits in memberlist's
// TCP connect for up to TCPTimeout (10 s) before the next. Plus a margin.
const maxMerge = 25 * time.Second

// TestNetnsPartitionHeals cuts two hosts off the mesh (every packet on the
// host's NIC dropped, in its namespace): n3, up, and n4, latched down by a
// grace violation just before. Both are served unreachable within
// maxDetection; the others stay up throughout, the heal included. Once
// their death has outlasted GossipToTheDeadTime (the cut lasts about 45 s),
// it heals: n3 merges back by itself (same agent process, same
// incarnation) within maxMerge and is up; n4 merges back too but is served
// down with its violation, since the latch is held by its agent and
// survives the partition.
func TestNetnsPartitionHeals(t *testing.T) {
	c := newNetnsCluster(t, 5)
	rec := c.record()
	n3, n4 := c.agent("n3"), c.agent("n4")

	hungEpilog(n4, "401")
	c.agg.waitNode(t, "n4", "latched down", 15*time.Second, func(n node) bool {
		return n.State == "down" && strings.Contains(n.Reason, "job 401")
	})
	before := statusJSON(t, n3)
	pid := n3.cmd.Process.Pid

	cutAt := time.Now()
	c.cut("n3")
	c.cut("n4")
	// The recorder stamps each event as it arrives, so waiting for one node
	// after the other measures both.
	took := map[string]time.Duration{}
	var lastDead time.Time
	for _, name := range []string{"n3", "n4"} {
		s := rec.wait(t, name+" unreachable", time.Until(cutAt.Add(maxDetection)), func(s seen) bool {
			return s.Node.Name == name && s.Node.State == "unreachable" && s.At.After(cutAt)
		})
		took[name] = s.At.Sub(cutAt)
		if s.At.After(lastDead) {
			lastDead = s.At
		}
	}
	t.Logf("cut off: n3 unreachable after %v, n4 after %v", took["n3"].Round(time.Millisecond), took["n4"].Round(time.Millisecond))
	if n := c.waitMember("n4", "unreachable", time.Second, func(n meshNode) bool { return n.State == "unreachable" }); !strings.Contains(n.Reason, "last reported down") {
		t.Errorf("n4 while cut off: reason %q, want the last reported down", n.Reason)
	}

	// The cut's length is the scenario: their death outlasts memberlist's
	// GossipToTheDeadTime (which no member reports), so that only the
	// rejoin loops can merge them back; not a wait: the cut's length.
	time.Sleep(time.Until(lastDead.Add(gossipToTheDead + 5*time.Second)))
	for _, a := range []*agent{n3, n4} {
		gone, last := declaredDead(a.proc, cutAt)
		t.Logf("at the heal %s had declared %d of the 5 others dead, the last %v before", a.node, len(gone), time.Since(last).Round(time.Millisecond))
	}
	if st := statusJSON(t, n3); st.State != "up" {
		t.Fatalf("n3's agent is %s during the cut, want up", st.State)
	}
	healAt := time.Now()
	c.clearFaults("n3")
	c.clearFaults("n4")
	t.Logf("healed after %v cut off, %v after the last was served unreachable",
		healAt.Sub(cutAt).Round(time.Millisecond), healAt.Sub(lastDead).Round(time.Millisecond))

	up := rec.wait(t, "n3 up again", maxMerge, func(s seen) bool {
		return s.Node.Name == "n3" && s.At.After(healAt) && s.Node.State == "up" && s.Node.Member == "alive"
	})
	t.Logf("n3 merged back and up %v after the heal", up.At.Sub(healAt).Round(time.Millisecond))
	back := rec.wait(t, "n4 back", time.Until(healAt.Add(maxMerge)), func(s seen) bool {
		return s.Node.Name == "n4" && s.At.After(healAt) && s.Node.State != "unreachable" && s.Node.Member == "alive"
	})
	t.Logf("n4 merged back %v after the heal: %s, %q", back.At.Sub(healAt).Round(time.Millisecond), back.Node.State, back.Node.Reason)
	if back.Node.State != "down" || !strings.Contains(back.Node.Reason, "job 401") {
		t.Fatalf("latched n4 came back %s (%q), want down with its violation", back.Node.State, back.Node.Reason)
	}
	if n, err := c.get("n4"); err != nil || n.State != "down" || n.Member != "alive" {
		t.Fatalf("n4 now: %+v (%v), want down and alive", n, err)
	}

	// No restart: the same process, the same incarnation.
	after := statusJSON(t, n3)
	if !n3.running() || n3.cmd.Process.Pid != pid || after.Incarnation != before.Incarnation {
		t.Fatalf("n3's agent restarted: pid %d->%d, incarnation %d->%d", pid, n3.cmd.Process.Pid, before.Incarnation, after.Incarnation)
	}
	// The rest of the mesh never saw a false down or unreachable, and n3
	// never went down, the heal included: a cut-off agent that still
	// remembers a healthy member as dead (its probes slowed by memberlist's
	// awareness) hands that death to the aggregator in the push-pull, and
	// the member refutes it within a second, inside unreachable_after.
	// Until no such death is left: each cut-off agent holds alive again
	// every member it declared dead, the aggregator's loop has processed
	// what it was handed, and the last state recorded of every node has
	// its member alive (a death the aggregator held past unreachable_after
	// was served unreachable before the refutation, and is recorded).
	for _, a := range []*agent{n3, n4} {
		gone, _ := declaredDead(a.proc, cutAt)
		testutil.Eventually(t, time.Minute, a.node+" holding alive again every member it declared dead", func() bool {
			back := rejoined(a.proc, healAt)
			for name := range gone {
				if !back[name] {
					return false
				}
			}
			return true
		})
	}
	c.agg.loopRound(t, netnsToken)
	var notAlive []string
	if !testutil.Poll(time.Minute, func() bool {
		notAlive = nil
		last := map[string]seen{}
		for _, s := range rec.all(t) {
			last[s.Node.Name] = s
		}
		for name, s := range last {
			if s.Node.Member != "alive" {
				notAlive = append(notAlive, name+" "+s.Node.Member)
			}
		}
		return len(notAlive) == 0
	}) {
		t.Fatalf("members still not alive a minute after the heal: %v", notAlive)
	}
	for _, s := range rec.bad(t, func(s seen) bool {
		switch s.Node.Name {
		case "n4":
			return true
		case "n3":
			return s.Node.State == "unreachable" && s.At.After(cutAt) && s.At.Before(up.At)
		}
		return false
	}) {
		t.Errorf("unexpected: %s %s at %s (%v after the heal, for %s): %s", s.Node.Name, s.Node.State,
			s.At.Format(time.StampMilli), s.At.Sub(healAt).Round(time.Millisecond), rec.lasted(t, s), s.Node.Reason)
	}
	c.checkOnlyDown(t, "n4")
}

// lossSeconds is GRACEWATCH_LOSS_SECONDS, default 60: what CI affords. The
// issue's "several minutes" is run with GRACEWATCH_LOSS_SECONDS=300 (the
// figures are in BENCHMARKS.md, "Faults").
func lossSeconds(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv("GRACEWATCH_LOSS_SECONDS")
	if v == "" {
		return 60 * time.Second
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 20 {
		t.Fatalf("GRACEWATCH_LOSS_SECONDS=%q: want a whole number of seconds, at least 20", v)
	}
	return time.Duration(n) * time.Second
}

// TestNetnsPacketLoss drops 10 % of the packets at random, in and out, on
// every host (the aggregator's and the five agents') for
// GRACEWATCH_LOSS_SECONDS, while /v1/watch is followed the whole time. No
// event may show any node down or unreachable, except n3, which gets a hung
// epilogue a third of the way in: its down must be seen within 2 s of its
// deadline D (from `nodeagent status --json`), and not before D. The same
// violation is first run on n3 without loss (then resumed), so the log
// shows both latencies.
//
// Meanwhile the four healthy agents run a short epilogue (0.5 s, well
// within the 3 s grace) about every 8 s, under the same rule: none may be
// served down. With a 1 s clock_skew_allowance each release must reach the
// aggregator within 3.5 s, while a new TCP connection loses its SYN or
// SYN-ACK about one time in three here and retries only 1 s later, then
// 3 s: the agent's sender starts a fresh attempt of the latest state when
// one hangs, writes each state twice (a write whose bytes sit in TCP's
// retransmission returned all the same: once, only the probe's answer
// ended a false down), and never queues a newer state behind an older
// one's send.
// GRACEWATCH_LOSS_TEARDOWNS=0 leaves the healthy agents idle. See
// BENCHMARKS.md, "Faults".
func TestNetnsPacketLoss(t *testing.T) {
	dur := lossSeconds(t)
	churn := os.Getenv("GRACEWATCH_LOSS_TEARDOWNS") != "0"
	c := newNetnsCluster(t, 5)
	rec := c.record()
	hung := c.agent("n3")

	// The same violation on n3 without loss first, as the baseline of the
	// latency; then n3 is resumed.
	hungEpilog(hung, "900")
	d0 := deadlineOf(t, hung, "900")
	base := rec.wait(t, "n3 down without loss", time.Until(d0)+10*time.Second, func(s seen) bool {
		return s.Node.Name == "n3" && s.Node.State == "down"
	})
	t.Logf("without loss: n3 down %v after its deadline D (reason %q)", base.At.Sub(d0).Round(time.Millisecond), base.Node.Reason)
	waitReleased(t, hung, "900")
	if out, code := hung.cli("resume", "--reason", "baseline done"); code != 0 {
		t.Fatalf("resume n3: exit %d: %s", code, out)
	}
	c.agg.waitNode(t, "n3", "up after resume", 10*time.Second, func(n node) bool { return n.State == "up" })
	baseEnd := time.Now()

	for _, h := range c.hosts() {
		c.loss(h, 10)
	}
	start := time.Now()
	end := start.Add(dur)
	t.Logf("10%% loss in and out on %d hosts for %v", len(c.hosts()), dur)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	var quick sync.Map // node -> count of epilogues that ran
	for i, a := range c.agents {
		if a == hung || !churn {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Staggered, one epilogue about every 8 s per agent.
			tick := time.NewTimer(time.Duration(i) * 2 * time.Second)
			defer tick.Stop()
			for k := 0; ; k++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				if time.Until(end) < 5*time.Second {
					return
				}
				if err := quickEpilog(ctx, a, fmt.Sprintf("ok-%d", k)); err != nil {
					errs <- err
					return
				}
				v, _ := quick.LoadOrStore(a.node, new(int))
				*v.(*int)++
				tick.Reset(8 * time.Second)
			}
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })

	time.Sleep(time.Until(start.Add(dur / 3))) // not a wait: the hung epilogue comes a third of the way into the loss
	hungAt := time.Now()
	hungEpilog(hung, "901")
	d := deadlineOf(t, hung, "901")
	down := rec.wait(t, "n3 down", time.Until(d)+10*time.Second, func(s seen) bool {
		return s.Node.Name == "n3" && s.Node.State == "down" && s.At.After(hungAt)
	})
	late := down.At.Sub(d)
	t.Logf("n3 down %v after its deadline D under loss (reason %q)", late.Round(time.Millisecond), down.Node.Reason)
	if late < 0 || late > 2*time.Second {
		t.Errorf("n3 down seen %v after D, want within [0, 2 s]", late)
	}
	own := rec.wait(t, "n3 down with the agent's reason", time.Until(d)+20*time.Second, func(s seen) bool {
		return s.Node.Name == "n3" && s.Node.State == "down" && strings.Contains(s.Node.Reason, "job 901")
	})
	t.Logf("the agent's own report of the violation served %v after D", own.At.Sub(d).Round(time.Millisecond))

	time.Sleep(time.Until(end)) // not a wait: the loss lasts GRACEWATCH_LOSS_SECONDS
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var seenTotal, droppedTotal int64
	for _, h := range c.hosts() {
		seenN, droppedN := c.lossCounters(h)
		seenTotal += seenN
		droppedTotal += droppedN
		c.clearFaults(h)
	}
	t.Logf("nft: %d of %d packets dropped (%.1f %%) over %v", droppedTotal, seenTotal,
		100*float64(droppedTotal)/float64(max(seenTotal, 1)), time.Since(start).Round(time.Second))

	all := rec.all(t)
	teardowns := 0
	for _, s := range all {
		if s.Node.State == "teardown" && s.Node.Name != "n3" {
			teardowns++
		}
	}
	t.Logf("memberlist during the test, all members: %d suspicions (\"no acks received\"), %d refuted, %d declared failed",
		c.countLogs("has failed, no acks received"), c.countLogs("Refuting a suspect message"), c.countLogs("suspect timeout reached"))
	ran := 0
	quick.Range(func(_, v any) bool { ran += *v.(*int); return true })
	t.Logf("%d watch states recorded", len(all))
	if churn {
		t.Logf("%d quick epilogues ran on the healthy agents, %d teardown states served for them", ran, teardowns)
	}
	if churn && (ran == 0 || teardowns == 0) {
		t.Errorf("the healthy agents' epilogues did not show (ran %d, teardown states %d)", ran, teardowns)
	}
	for _, s := range rec.bad(t, func(s seen) bool {
		return s.Node.Name == "n3" && s.Node.State == "down" &&
			(!s.At.Before(base.At) && s.At.Before(baseEnd) || !s.At.Before(down.At))
	}) {
		t.Errorf("false %s at %s (%v into the loss, for %s): %s (%s; member %s)", s.Node.State, s.At.Format(time.StampMilli),
			s.At.Sub(start).Round(time.Millisecond), rec.lasted(t, s), s.Node.Name, s.Node.Reason, s.Node.Member)
	}
	c.checkOnlyDown(t, "n3")
}

// TestNetnsStoppedAgent freezes an agent (SIGSTOP by pid) during a
// teardown: the aggregator serves it down at D + clock_skew_allowance on
// its own, "no report after teardown deadline", not before and within a
// second after. Thawed (SIGCONT), the agent reports its own violation.
func TestNetnsStoppedAgent(t *testing.T) {
	c := newNetnsCluster(t, 5)
	rec := c.record()
	n2 := c.agent("n2")

	n2.epilog("501", "sleep", "300")
	d := deadlineOf(t, n2, "501")
	c.agg.waitNode(t, "n2", "teardown", time.Until(d), func(n node) bool { return n.State == "teardown" })
	t.Cleanup(func() { n2.cmd.Process.Signal(syscall.SIGCONT) })
	testutil.Freeze(t, n2.cmd.Process.Pid)
	frozenAt := time.Now()
	if !frozenAt.Before(d) {
		t.Fatalf("frozen %v after D: too late for the test", frozenAt.Sub(d))
	}

	// The mesh carries D in whole milliseconds.
	at := d.Truncate(time.Millisecond).Add(netnsAllowance)
	down := rec.wait(t, "n2 down", time.Until(at)+5*time.Second, func(s seen) bool {
		return s.Node.Name == "n2" && s.Node.State == "down"
	})
	late := down.At.Sub(at)
	t.Logf("frozen %v before D; down %v after D + allowance (member %s): %q",
		d.Sub(frozenAt).Round(time.Millisecond), late.Round(time.Millisecond), down.Node.Member, down.Node.Reason)
	if late < 0 || late > time.Second {
		t.Errorf("down %v after D + allowance, want within [0, 1 s]", late)
	}
	if !strings.Contains(down.Node.Reason, "no report after teardown deadline") {
		t.Errorf("reason %q, want the central one", down.Node.Reason)
	}
	if !down.Node.Since.Equal(at) {
		t.Errorf("since %v, want D + allowance %v", down.Node.Since, at)
	}

	if err := n2.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	n := c.waitMember("n2", "down with the agent's reason", 30*time.Second, func(n meshNode) bool {
		return n.State == "down" && n.Member == "alive" && strings.Contains(n.Reason, "job 501")
	})
	t.Logf("thawed: %q", n.Reason)
	for _, s := range rec.bad(t, func(s seen) bool {
		return s.Node.Name == "n2" && s.Node.State == "down" && !s.At.Before(at)
	}) {
		t.Errorf("unexpected at %s: %s %s (%s)", s.At.Format(time.StampMilli), s.Node.Name, s.Node.State, s.Node.Reason)
	}
}

// checkOnlyDown checks that the aggregator serves node down and every other
// node up.
func (c *netnsCluster) checkOnlyDown(t *testing.T, node string) {
	t.Helper()
	for _, n := range c.agg.nodes(t, "") {
		want := "up"
		if n.Name == node {
			want = "down"
		}
		if n.State != want {
			t.Errorf("at the end %s is %s, want %s", n.Name, n.State, want)
		}
	}
}
