package e2e

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/gracewatch/gracewatch/internal/testutil"
	craft "github.com/gracewatch/gracewatch/internal/testutil/rogue"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// The attacks of a compromised node on memberlist's failure detector
// (issue 19), repeated against real agents and a real aggregator on
// loopback by a rogue that holds the mesh key (and one node's key) and
// writes memberlist's own alive and dead messages (internal/testutil/
// rogue). The aggregator runs with unreachable_is_down, so that a node
// wrongly taken for gone would be drained, and actuators that write a log.
//
// The window a node may be served unreachable or down because of an
// attack is none: each subtest polls the view every 50 ms throughout.

// crafter returns a rogue writing memberlist's messages into c's mesh,
// sealed with its keyring's primary key and label.
func (c *cluster) crafter(t *testing.T) *craft.Crafter {
	t.Helper()
	return newCrafter(t, c.keyfile, c.label)
}

// newCrafter returns a rogue writing memberlist's messages into the mesh
// of keyfile and label, closed when tb ends.
func newCrafter(tb testing.TB, keyfile, label string) *craft.Crafter {
	tb.Helper()
	kr, err := mesh.LoadKeyring(keyfile)
	if err != nil {
		tb.Fatal(err)
	}
	r, err := craft.New(label, kr.GetPrimaryKey())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { r.Close() })
	return r
}

var bindLine = regexp.MustCompile(`(?m)^bind = "([^"]+)"`)

// meshAddr is the mesh address of a member started from config.
func meshAddr(t *testing.T, config string) string {
	t.Helper()
	b, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	m := bindLine.FindSubmatch(b)
	if m == nil {
		t.Fatalf("no bind address in %s", config)
	}
	return string(m[1])
}

// repeat sends msgs to addr every 300 ms until the returned stop is
// called (the attacker keeps its forgery alive against refutations).
func repeat(t *testing.T, r *craft.Crafter, addr string, msgs ...[]byte) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			for _, m := range msgs {
				if err := r.Send(addr, m); err != nil {
					t.Error(err)
					return
				}
			}
			select {
			case <-done:
				return
			case <-time.After(300 * time.Millisecond):
			}
		}
	})
	var once sync.Once
	stop = func() { once.Do(func() { close(done); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// watchStates polls the aggregator every 50 ms and records every state
// each node was served in, until stop.
type stateLog struct {
	mu   sync.Mutex
	seen map[string]map[string]bool // node -> states
	stop chan struct{}
	done chan struct{}
}

func pollStates(t *testing.T, g *aggregator) *stateLog {
	l := &stateLog{seen: map[string]map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for {
			if ns, err := fetchNodes(g.url + "/v1/nodes"); err == nil {
				l.mu.Lock()
				for _, n := range ns {
					if l.seen[n.Name] == nil {
						l.seen[n.Name] = map[string]bool{}
					}
					l.seen[n.Name][n.State+": "+n.Reason] = true
				}
				l.mu.Unlock()
			}
			select {
			case <-l.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(l.end)
	return l
}

func (l *stateLog) end() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}

// served returns the states node was served in, with their reasons.
func (l *stateLog) served(node string) []string {
	l.end()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for s := range l.seen[node] {
		out = append(out, s)
	}
	return out
}

// only fails unless node was served only in the states listed.
func (l *stateLog) only(t *testing.T, node string, states ...string) {
	t.Helper()
	for _, s := range l.served(node) {
		ok := false
		for _, want := range states {
			// "up" is the state whatever the reason; "down: drained by x"
			// the state with a reason that starts so.
			if strings.HasPrefix(s, want+":") || strings.Contains(want, ": ") && strings.HasPrefix(s, want) {
				ok = true
			}
		}
		if !ok {
			t.Errorf("%s was served %q (want only %v)", node, s, states)
		}
	}
}

// actionsSince returns the actuator log's lines after the first n bytes.
func actionsSince(t *testing.T, path string, n int) string {
	t.Helper()
	b, _ := os.ReadFile(path)
	return string(b[min(n, len(b)):])
}

func fileSize(path string) int {
	b, _ := os.ReadFile(path)
	return len(b)
}

// waitLogged waits (bounded) until p's log holds every sub.
func waitLogged(t *testing.T, p *proc, what string, subs ...string) {
	t.Helper()
	const timeout = 30 * time.Second
	if !testutil.Poll(timeout, func() bool {
		logs := p.logs.String()
		for _, s := range subs {
			if !strings.Contains(logs, s) {
				return false
			}
		}
		return true
	}) {
		var missing []string
		logs := p.logs.String()
		for _, s := range subs {
			if !strings.Contains(logs, s) {
				missing = append(missing, s)
			}
		}
		t.Fatalf("%s: %s does not log %q within %v (missing %q)", what, p.name, subs, timeout, missing)
	}
}

// probesAnswered is the aggregator's count of the probes of why ("gone",
// "deadline") that a node answered.
func probesAnswered(t *testing.T, g *aggregator, why string) float64 {
	t.Helper()
	return metric(t, g, `gracewatch_aggregator_probes_total{result="answered",why="`+why+`"}`)
}

// sealAs writes env as node (sent at sent), sealed with node's key: what
// the holder of that key (root on node) can make, or a message of node's
// captured on the wire.
func (c *cluster) sealAs(t *testing.T, node string, sent time.Time, env *gwpb.Envelope) []byte {
	t.Helper()
	key, err := mesh.LoadNodeKey(c.keys.nodeKey(node))
	if err != nil {
		t.Fatal(err)
	}
	env.Schema, env.From, env.SentMs = 1, node, sent.UnixMilli()
	b, err := mesh.EncodeEnvelope(env)
	if err != nil {
		t.Fatal(err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("gracewatch envelope v1\x00"))
	mac.Write(b)
	b = protowire.AppendTag(b, 2046, protowire.BytesType)
	return protowire.AppendBytes(b, mac.Sum(nil))
}

// sendRaw sends an encoded envelope from the rogue member over
// memberlist's stream to the member named to at addr (whatever the rogue's
// own memberlist thinks of it by then).
func (r *rogue) sendRaw(t *testing.T, to, addr string, b []byte) {
	t.Helper()
	ap := netip.MustParseAddrPort(addr)
	n := &memberlist.Node{Name: to, Addr: ap.Addr().AsSlice(), Port: ap.Port()}
	if err := r.ml.SendReliable(n, b); err != nil {
		t.Fatalf("send to %s: %v", to, err)
	}
}

// actuatorLog is an aggregator's actuators (on down and up) that append a
// line to path: "down NODE REASON", "up NODE".
func actuatorLog(path string) string { return actuatorLogUp(path, "{node}") }

// actuatorLogUp is actuatorLog whose on="up" actuator is given up ("{node}",
// or "{nodes}" for one run per hostlist): "up HOSTS".
func actuatorLogUp(path, up string) string {
	return fmt.Sprintf(`
[[actuator]]
on = "down"
command = ["sh", "-c", "echo \"down $0 $1\" >> %[1]s", "{node}", "{reason}"]
timeout = "5s"

[[actuator]]
on = "up"
command = ["sh", "-c", "echo \"up $0\" >> %[1]s", "%[2]s"]
timeout = "5s"
`, path, up)
}

// drainResume drains node through g (an administrator's request) and
// resumes it, each answered 200 and served.
func drainResume(t *testing.T, g *aggregator, token, name, reason string) {
	t.Helper()
	if code, body := g.post(t, "/v1/nodes/"+name+"/drain", token, `{"reason":"`+reason+`"}`); code != 200 {
		t.Fatalf("drain of %s: %d %s", name, code, body)
	}
	g.waitNode(t, name, "drained", 5*time.Second, func(n node) bool { return n.State == "down" && strings.Contains(n.Reason, reason) })
	if code, body := g.post(t, "/v1/nodes/"+name+"/resume", token, `{"reason":"done"}`); code != 200 {
		t.Fatalf("resume of %s: %d %s", name, code, body)
	}
	g.waitNode(t, name, "resumed", 5*time.Second, func(n node) bool { return n.State == "up" })
}

// startJob registers job on a with an expiration an hour away and starts
// its epilogue.
func startJob(t *testing.T, a *agent, job string, argv ...string) {
	t.Helper()
	if out, code := a.cli("job", "start", "--job", job, "--expiration", time.Now().Add(time.Hour).Format(time.RFC3339)); code != 0 {
		t.Fatalf("job start %s on %s: %s", job, a.node, out)
	}
	a.epilog(job, argv...)
}

func TestLivenessAttacks(t *testing.T) {
	c := newCluster(t)
	actions := filepath.Join(c.dir, "actions.log")
	c.aggConf = "unreachable_is_down = true\n" + actuatorLog(actions)
	agg := c.addAggregator("agg-1")
	aggAddr := c.seeds[0]
	n1, n2, n3 := c.addAgent("n1"), c.addAgent("n2"), c.addAgent("n3")
	c.waitAllUp(t, agg)
	r := c.crafter(t)
	// A member of the mesh too (root on "rogue"), for what it copies and
	// sends over memberlist's streams.
	rm := c.joinRogue(t, "rogue", encodeMeta(t, &gwpb.Meta{Role: gwpb.Role_ROLE_AGENT}, nil))
	// agg-1's signed meta, as every member sees it.
	var stolen []byte
	testutil.Poll(30*time.Second, func() bool {
		for _, m := range rm.ml.Members() {
			if m.Name == "agg-1" {
				stolen = m.Meta
			}
		}
		return len(stolen) > 0
	})
	if len(stolen) == 0 {
		t.Fatal("the rogue does not see agg-1's meta")
	}

	t.Run("a node dead for good: one dead message at the maximal incarnation", func(t *testing.T) {
		mark := fileSize(actions)
		states := pollStates(t, agg)
		answered := probesAnswered(t, agg, "gone")
		stop := repeat(t, r, aggAddr, craft.Dead("n1", "rogue", craft.MaxIncarnation))
		// memberlist holds n1 dead (its refutation wraps to 0 and is
		// ignored); the aggregator asks n1 and takes its answer.
		waitLogged(t, agg.proc, "memberlist's verdict", `"msg":"member gone","aggregator":"agg-1","component":"mesh","node":"n1"`)
		// Past unreachable_after (2 s) and a probe's wait: a proof of life
		// holds 15 s, and n1 is asked again every 5 s, so its second
		// answered probe comes after the aggregator's loop passed the end
		// of unreachable_after (a timer of the same loop).
		testutil.Eventually(t, 60*time.Second, "n1's second answer to a probe since memberlist took it for gone", func() bool {
			return probesAnswered(t, agg, "gone") >= answered+2
		})
		// An administrator's drain and resume work.
		drainResume(t, agg, c.token, "n1", "maintenance")
		stop()
		// The drain's reason, as n1's agent reports it, while the poll
		// happens to fall between the drain and the resume.
		states.only(t, "n1", "up", "down: drained by agg-1 (HTTP from ")
		if logs := agg.logs.String(); !strings.Contains(logs, "memberlist's word that it is gone is not taken") {
			t.Error("the aggregator does not say that n1's answer overrode memberlist's word")
		}
		waitFile(t, actions, "up n1")
		if got := actionsSince(t, actions, mark); strings.Count(got, "down n1") != 1 || !strings.Contains(got, "maintenance") {
			t.Errorf("actuators ran %q: want the administrator's drain only", got)
		}
	})

	t.Run("the aggregator dead to the agents: no false DOWN, no lost DOWN", func(t *testing.T) {
		mark := fileSize(actions)
		// Sent to every agent (the rogue reaches them all): memberlist
		// gossips a dead message a few times only, to random members, so
		// gossip from one agent alone may miss another for longer than the
		// wait below. Every agent's memberlist holds agg-1 dead.
		var stops []func()
		for _, a := range c.agents {
			stops = append(stops, repeat(t, r, meshAddr(t, a.config), craft.Dead("agg-1", "rogue", craft.MaxIncarnation)))
		}
		stop := func() {
			for _, s := range stops {
				s()
			}
		}
		for _, a := range c.agents {
			waitLogged(t, a.proc, "the attack reached "+a.node, "aggregator lost by gossip")
		}
		states := pollStates(t, agg)
		startJob(t, n1, "401", "sleep", "1")                               // ends within G
		startJob(t, n2, "402", "sh", "-c", "trap '' TERM; exec sleep 300") // hangs: DOWN at D
		agg.waitNode(t, "n2", "down (its agent's)", 15*time.Second, func(n node) bool {
			return n.State == "down" && strings.Contains(n.Reason, "job 402 teardown exceeded grace")
		})
		agg.waitNode(t, "n1", "up again", 10*time.Second, func(n node) bool { return n.State == "up" })
		// n1 served up after its teardown is the later event: the
		// aggregator arms a central deadline (D + allowance) only for a
		// node whose agent's last report is a teardown, so nothing is
		// left to time for n1. n2's drain is run by its actuator after the
		// transition: its line is the event the check below needs.
		waitFile(t, actions, "down n2")
		stop()
		states.only(t, "n1", "up", "teardown")
		for _, s := range states.served("n2") {
			if strings.Contains(s, "no report after teardown deadline") {
				t.Errorf("n2 was served %q: its agent's DOWN did not arrive", s)
			}
		}
		if got := actionsSince(t, actions, mark); strings.Contains(got, "down n1") || !strings.Contains(got, "down n2") {
			t.Errorf("actuators ran %q: want n2's drain and nothing for n1", got)
		}
		if code, body := agg.post(t, "/v1/nodes/n2/resume", c.token, `{"reason":"fixed"}`); code != 200 {
			t.Fatalf("resume n2: %d %s", code, body)
		}
		agg.waitNode(t, "n2", "resumed", 10*time.Second, func(n node) bool { return n.State == "up" })
	})

	t.Run("agents cut off their aggregator: an alive message with an empty meta", func(t *testing.T) {
		stop := repeat(t, r, meshAddr(t, n1.config), craft.Alive("agg-1", aggAddr, craft.MaxIncarnation, nil))
		// It reaches n1, which refuses it (so none of n1's gossip carries it).
		waitLogged(t, n1.proc, "the forgery reached n1", `"reason":"aggregator_meta"`)
		startJob(t, n3, "403", "sh", "-c", "trap '' TERM; exec sleep 300")
		agg.waitNode(t, "n3", "down (its agent's)", 15*time.Second, func(n node) bool {
			return n.State == "down" && strings.Contains(n.Reason, "job 403 teardown exceeded grace")
		})
		stop()
		if logs := n1.logs.String(); !strings.Contains(logs, `"reason":"aggregator_meta"`) {
			t.Error("n1 does not log the refused alive message")
		}
		if code, body := agg.post(t, "/v1/nodes/n3/resume", c.token, `{"reason":"fixed"}`); code != 200 {
			t.Fatalf("resume n3: %d %s", code, body)
		}
		agg.waitNode(t, "n3", "resumed", 10*time.Second, func(n node) bool { return n.State == "up" })
	})

	t.Run("the aggregator's address taken over: a forged leave, then its signed meta at another address", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		var taken atomic.Int64
		go func() {
			for {
				conn, err := l.Accept()
				if err != nil {
					return
				}
				taken.Add(1)
				conn.Close()
			}
		}()
		mark := fileSize(actions)
		states := pollStates(t, agg)
		stop := repeat(t, r, meshAddr(t, n1.config),
			craft.Dead("agg-1", "agg-1", craft.MaxIncarnation),
			craft.Alive("agg-1", l.Addr().String(), craft.MaxIncarnation, stolen))
		waitLogged(t, n1.proc, "the forgery reached n1", `"reason":"address_takeover"`)
		startJob(t, n1, "404", "sleep", "1")
		agg.waitNode(t, "n1", "teardown", 10*time.Second, func(n node) bool { return n.State == "teardown" })
		// Its report of the end of the teardown, sent after the forgery
		// reached it, has reached agg-1: nothing is left to time for n1
		// (the central deadline is armed only for a node in teardown).
		agg.waitNode(t, "n1", "up again", 10*time.Second, func(n node) bool { return n.State == "up" })
		stop()
		states.only(t, "n1", "up", "teardown")
		if n := taken.Load(); n != 0 {
			t.Errorf("n1 connected %d times to the address the rogue claimed for agg-1", n)
		}
		if logs := n1.logs.String(); !strings.Contains(logs, `"reason":"address_takeover"`) {
			t.Error("n1 does not log the refused takeover")
		}
		if got := actionsSince(t, actions, mark); strings.Contains(got, "down n1") {
			t.Errorf("actuators ran %q", got)
		}
	})

	t.Run("replays: a captured update two minutes later, an agent start in the year 2255", func(t *testing.T) {
		mark := fileSize(actions)
		states := pollStates(t, agg)
		down := func(node, reason string, started time.Time) *gwpb.Envelope {
			return &gwpb.Envelope{Body: &gwpb.Envelope_State{State: &gwpb.StateUpdate{
				Meta:      &gwpb.Meta{Schema: 1, Role: gwpb.Role_ROLE_AGENT, Incarnation: 1, Seq: 1, State: gwpb.State_STATE_DOWN, Reason: reason, SinceMs: started.UnixMilli()},
				Reason:    reason,
				StartedMs: started.UnixMilli(),
			}}}
		}
		// n1's own update, as captured two minutes ago.
		rm.sendRaw(t, "agg-1", aggAddr, c.sealAs(t, "n1", time.Now().Add(-2*time.Minute), down("n1", "replayed", time.Now().Add(-time.Minute))))
		// Root on n3 (its key): an agent start far in the future would
		// shut the real agent out.
		far := time.Date(2255, 1, 1, 0, 0, 0, 0, time.UTC)
		rm.sendRaw(t, "agg-1", aggAddr, c.sealAs(t, "n3", time.Now(), down("n3", "from the future", far)))
		waitLogged(t, agg.proc, "refused", "message refused: not fresh or not plausible", `"node":"n1"`, `"node":"n3"`)
		// n3's real agent is still heard: an administrator's drain is
		// carried out and served.
		drainResume(t, agg, c.token, "n3", "check")
		states.only(t, "n1", "up")
		for _, s := range states.served("n3") {
			if strings.Contains(s, "from the future") {
				t.Errorf("n3 served %q", s)
			}
		}
		if got := actionsSince(t, actions, mark); strings.Contains(got, "down n1") {
			t.Errorf("actuators ran %q", got)
		}
	})

	t.Run("a node's address taken over: a forged leave, an alive at another address, a dead", func(t *testing.T) {
		// The rogue's address for n2: it accepts and closes (so a send
		// there "succeeds" and no answer ever comes).
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			for {
				conn, err := l.Accept()
				if err != nil {
					return
				}
				conn.Close()
			}
		}()
		evil := l.Addr().String()
		mark := fileSize(actions)
		states := pollStates(t, agg)
		answered := probesAnswered(t, agg, "gone")
		// memberlist takes the address of a member it holds left (the
		// forged leave: a dead message from n2 itself) from the next
		// alive message, then holds it dead there. One step at a time:
		// memberlist handles the queued dead messages last in, first out,
		// and its alive messages before them.
		at := func(addr string) string { return `"node":"n2","addr":"` + addr + `"` }
		stop := repeat(t, r, aggAddr, craft.Dead("n2", "n2", craft.MaxIncarnation))
		waitLogged(t, agg.proc, "the forged leave", `"msg":"member gone","aggregator":"agg-1","component":"mesh",`+at(meshAddr(t, n2.config)))
		stop()
		stop = repeat(t, r, aggAddr, craft.Alive("n2", evil, craft.MaxIncarnation, nil))
		waitLogged(t, agg.proc, "the alive at the rogue's address", `"msg":"member back","aggregator":"agg-1","component":"mesh",`+at(evil))
		stop()
		stop = repeat(t, r, aggAddr, craft.Dead("n2", "rogue", craft.MaxIncarnation))
		waitLogged(t, agg.proc, "the takeover", `"msg":"member gone","aggregator":"agg-1","component":"mesh",`+at(evil)+`,"status":"dead"`)
		// The probes that ask n2 whether it is gone go where n2 said it is
		// (its own signed update), not to the rogue's address. Its leave
		// and its death are one probe each at once (or one, if the first
		// is still out); after that, while answered, it is asked every
		// 5 s: the third answer comes after unreachable_after (2 s) has
		// passed since the death, and its result recomputes n2 on the
		// aggregator's loop, past the time n2 would have been served
		// unreachable without an answer.
		testutil.Eventually(t, 60*time.Second, "n2's third answer to a probe since the takeover", func() bool {
			return probesAnswered(t, agg, "gone") >= answered+3
		})
		stop()
		states.only(t, "n2", "up")
		if got := actionsSince(t, actions, mark); strings.Contains(got, "down n2") {
			t.Errorf("actuators ran %q: n2 drained by the takeover", got)
		}
	})
}
