package e2e

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// rogue is a member that holds the mesh key and nothing else a compute
// node does not share (root on some compute node: that node's own key,
// which speaks for that node only). It is a bare memberlist member that
// writes gracewatch's wire format by hand, so nothing of gracewatch's own
// sending code is in the way: it can claim any name, role and sender.
type rogue struct {
	t       *testing.T
	ml      *memberlist.Memberlist
	meta    []byte
	nodeKey []byte // the key of the node it is root on
}

func (r *rogue) NodeMeta(int) []byte                    { return r.meta }
func (r *rogue) NotifyMsg([]byte)                       {}
func (r *rogue) GetBroadcasts(int, int) [][]byte        { return nil }
func (r *rogue) LocalState(bool) []byte                 { return nil }
func (r *rogue) MergeRemoteState(buf []byte, join bool) {}

// joinRogue starts a rogue member named name that gossips meta, joined to
// the cluster with its mesh key and label; it leaves at the test's end.
func (c *cluster) joinRogue(t *testing.T, name string, meta []byte) *rogue {
	t.Helper()
	kr, err := mesh.LoadKeyring(c.keyfile)
	if err != nil {
		t.Fatal(err)
	}
	key, err := mesh.LoadNodeKey(c.keys.nodeKey("rogue"))
	if err != nil {
		t.Fatal(err)
	}
	r := &rogue{t: t, meta: meta, nodeKey: key}
	mc := memberlist.DefaultLocalConfig()
	mc.Name, mc.BindAddr, mc.BindPort, mc.AdvertisePort = name, "127.0.0.1", 0, 0
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{"127.0.0.1"},
		Logger: log.New(io.Discard, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	mc.Transport = handledStreams{nt}
	mc.Label, mc.Keyring, mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = c.label, kr, true, true
	mc.Delegate = r
	mc.LogOutput = testWriter{t, name}
	if r.ml, err = memberlist.Create(mc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.ml.Shutdown() })
	if _, err := r.ml.Join(c.seeds); err != nil {
		t.Fatal(err)
	}
	return r
}

// handledStreams is a rogue's memberlist transport: a stream the rogue
// opened is closed only once the member at the other end has closed it
// (at most a minute), which memberlist does when it has handled what the
// stream carried (handleConn: a direct message has been through the
// delegate's NotifyMsg, judged, and handed to the agent or aggregator, or
// refused), or when it refused the stream itself. So SendReliable returns
// once the receiver has taken or refused the message: a test needs no
// time for it to arrive.
type handledStreams struct{ *memberlist.NetTransport }

func (h handledStreams) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	c, err := h.NetTransport.DialAddressTimeout(a, timeout)
	if err != nil {
		return nil, err
	}
	return closeAfterPeer{c}, nil
}

// closeAfterPeer is a stream whose Close says it has written all, and
// waits for the other end to close.
type closeAfterPeer struct{ net.Conn }

func (c closeAfterPeer) Close() error {
	if tc, ok := c.Conn.(*net.TCPConn); ok {
		tc.CloseWrite()
		tc.SetReadDeadline(time.Now().Add(time.Minute))
		io.Copy(io.Discard, tc)
	}
	return c.Conn.Close()
}

type testWriter struct {
	t    *testing.T
	name string
}

func (w testWriter) Write(p []byte) (int, error) { return len(p), nil } // memberlist's chatter is not the test's

// send writes env to the member named to, sealed with the rogue's own node
// key when seal (an HMAC as an agent's, mesh/auth.go's trailer format: what
// a node's root can make), else unsigned.
func (r *rogue) send(to string, env *gwpb.Envelope, seal bool) {
	r.t.Helper()
	env.Schema, env.SentMs = 1, time.Now().UnixMilli()
	b, err := mesh.EncodeEnvelope(env)
	if err != nil {
		r.t.Fatal(err)
	}
	if seal {
		mac := hmac.New(sha256.New, r.nodeKey)
		mac.Write([]byte("gracewatch envelope v1\x00"))
		mac.Write(b)
		b = protowire.AppendTag(b, 2046, protowire.BytesType)
		b = protowire.AppendBytes(b, mac.Sum(nil))
	}
	for _, m := range r.ml.Members() {
		if m.Name == to {
			if err := r.ml.SendReliable(m, b); err != nil {
				r.t.Fatalf("send to %s: %v", to, err)
			}
			return
		}
	}
	r.t.Fatalf("rogue does not see %s", to)
}

func encodeMeta(t *testing.T, m *gwpb.Meta, trailer []byte) []byte {
	t.Helper()
	m.Schema = 1
	b, err := mesh.EncodeMeta(m)
	if err != nil {
		t.Fatal(err)
	}
	if trailer != nil {
		b = protowire.AppendTag(b, 2046, protowire.BytesType)
		b = protowire.AppendBytes(b, trailer)
	}
	return b
}

func stateEnv(from string, st gwpb.State, seq uint64, reason string) *gwpb.Envelope {
	return &gwpb.Envelope{From: from, Body: &gwpb.Envelope_State{State: &gwpb.StateUpdate{
		Meta:      &gwpb.Meta{Schema: 1, Role: gwpb.Role_ROLE_AGENT, Incarnation: 99, Seq: seq, State: st, Reason: reason, SinceMs: time.Now().UnixMilli()},
		Reason:    reason,
		StartedMs: time.Now().UnixMilli(),
	}}}
}

// viewOf is what the test compares before and after the attacks: every
// node's name, state and reason.
func viewOf(t *testing.T, g *aggregator) string {
	t.Helper()
	var out []string
	for _, n := range g.nodes(t, "") {
		out = append(out, fmt.Sprintf("%s=%s(%s)", n.Name, n.State, n.Reason))
	}
	return strings.Join(out, " ")
}

func leaderOf(t *testing.T, g *aggregator) string {
	t.Helper()
	resp, err := http.Get(g.url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h struct {
		Leader string `json:"leader"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	return h.Leader
}

// countLogged counts the lines of logs that carry msg and the claimed
// sender from (JSON logs).
func countLogged(logs, msg, from string) int {
	n := 0
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, msg) && strings.Contains(line, `"from":"`+from+`"`) {
			n++
		}
	}
	return n
}

// Node restriction, end to end: a member holding the mesh key (and its own
// node's key) repeats every attack of issue 11 against real agents and a
// real aggregator. Each is refused and logged with the sender it claimed,
// and no view, latch, drained set or actuator run changes.
func TestNodeRestriction(t *testing.T) {
	c := newCluster(t)
	actions := filepath.Join(c.dir, "actions.log")
	c.aggConf = actuatorLog(actions)
	agg := c.addAggregator("agg-1")
	n1, n2 := c.addAgent("n1"), c.addAgent("n2")
	c.waitAllUp(t, agg)
	// A real DOWN latch on n1, drained through the aggregator.
	if code, body := agg.post(t, "/v1/nodes/n1/drain", c.token, `{"reason":"maintenance"}`); code != 200 {
		t.Fatalf("drain: %d %s", code, body)
	}
	agg.waitNode(t, "n1", "down", 5*time.Second, func(n node) bool { return n.State == "down" })
	waitFile(t, actions, "down n1")

	// The rogue joins, gossiping a down state for itself.
	r := c.joinRogue(t, "rogue", encodeMeta(t, &gwpb.Meta{Role: gwpb.Role_ROLE_AGENT, Incarnation: 5, Seq: 5, State: gwpb.State_STATE_DOWN, Reason: "gossiped"}, nil))
	// Members claiming the aggregator role: unsigned, and with a forged
	// proof. The first sorts before agg-1, so it would lead.
	forged := make([]byte, 72)
	rand.Read(forged)
	rogues := []*rogue{r,
		c.joinRogue(t, "aaa-rogue-agg", encodeMeta(t, &gwpb.Meta{Role: gwpb.Role_ROLE_AGGREGATOR}, nil)),
		c.joinRogue(t, "aab-rogue-agg", encodeMeta(t, &gwpb.Meta{Role: gwpb.Role_ROLE_AGGREGATOR}, forged))}
	// Each rogue pushes its state to each agent itself: gossip alone
	// reaches a given member only by chance, as the seed (the aggregator)
	// refuses the rogue aggregators and so never passes them on. Each
	// agent has then logged each (joined, or refused).
	for _, rg := range rogues {
		if _, err := rg.ml.Join([]string{n1.bind, n2.bind}); err != nil {
			t.Fatal(err)
		}
	}
	heard := time.Now()
	for _, a := range []*agent{n1, n2} {
		for _, name := range []string{"rogue", "aaa-rogue-agg", "aab-rogue-agg"} {
			testutil.Eventually(t, 2*time.Minute, a.node+" hearing of "+name, func() bool {
				return strings.Contains(a.logs.String(), `"node":"`+name+`"`)
			})
		}
	}
	t.Logf("the agents heard of the rogues within %v", time.Since(heard).Round(time.Millisecond))

	before := viewOf(t, agg)
	actionsBefore, _ := os.ReadFile(actions)
	drainedBefore, _ := os.ReadFile(filepath.Join(c.dir, "agg-1-state", "drained.json"))

	t.Run("control from a non-aggregator: resume and drain refused by the agents", func(t *testing.T) {
		resume := &gwpb.Envelope{From: "agg-1", To: "n1", Body: &gwpb.Envelope_Control{Control: &gwpb.Control{Id: "r1", Action: gwpb.Action_ACTION_RESUME, Reason: "spoofed"}}}
		r.send("n1", resume, false)
		r.send("n1", resume, true)
		drain := &gwpb.Envelope{From: "nobody", To: "n2", Body: &gwpb.Envelope_Control{Control: &gwpb.Control{Id: "d1", Action: gwpb.Action_ACTION_DRAIN, Reason: "spoofed"}}}
		r.send("n2", drain, false)
		reg := &gwpb.Envelope{From: "agg-1", To: "n2", Body: &gwpb.Envelope_Control{Control: &gwpb.Control{Id: "j1", Action: gwpb.Action_ACTION_REGISTER_JOB,
			Job: &gwpb.JobRegistration{Job: "666", Expiration: fmt.Sprint(time.Now().Add(time.Second).Unix()), Grace: "1s"}}}}
		r.send("n2", reg, true)
	})
	t.Run("state updates for other nodes and invented names refused by the aggregator", func(t *testing.T) {
		r.send("agg-1", stateEnv("n1", gwpb.State_STATE_UP, 1000, ""), true)
		r.send("agg-1", stateEnv("n1", gwpb.State_STATE_UP, 1001, ""), false)
		r.send("agg-1", stateEnv("n2", gwpb.State_STATE_DOWN, 1000, "spoofed"), true)
		for _, name := range []string{"node[1-2]", "ALL", "-x", "", "n9"} {
			r.send("agg-1", stateEnv(name, gwpb.State_STATE_DOWN, 1, "spoofed"), true)
		}
	})
	// Each message was taken or refused as r.send returned (handledStreams);
	// what the aggregator took, its loop has processed after this.
	agg.loopRound(t, c.token)

	if st := n1.status(); st.State != "down" || !strings.Contains(st.Reason, "maintenance") {
		t.Errorf("n1's agent after a spoofed resume: %s %q", st.State, st.Reason)
	}
	if st := n2.status(); st.State != "up" || len(st.Jobs) != 0 {
		t.Errorf("n2's agent after a spoofed drain and job: %s %q, jobs %v", st.State, st.Reason, st.Jobs)
	}
	if after := viewOf(t, agg); after != before {
		t.Errorf("the view changed:\nbefore %s\nafter  %s", before, after)
	}
	if !strings.Contains(before, "n1=down") || !strings.Contains(before, "n2=up") || strings.Contains(before, "rogue") {
		t.Errorf("view %s: want n1 down, n2 up, no rogue", before)
	}
	if l := leaderOf(t, agg); l != "agg-1" {
		t.Errorf("leader %q, want agg-1", l)
	}
	for _, a := range []*agent{n1, n2} {
		// Refused before memberlist's table takes it (its alive message),
		// or, had it got there, its meta.
		if logs := a.logs.String(); strings.Contains(logs, "aaa-rogue-agg") &&
			!strings.Contains(logs, "refused a member meta") && !strings.Contains(logs, "refused a member's alive message") {
			t.Errorf("%s treats the rogue aggregator as one", a.node)
		}
	}

	// Logged once per claimed sender (the rate limit's interval is 10 s).
	aggLogs := agg.logs.String()
	for _, from := range []string{"n1", "n2"} {
		if n := countLogged(aggLogs, "refused a message whose sender is not proven", from); n != 1 {
			t.Errorf("aggregator logged %d refusals claiming %s, want 1", n, from)
		}
	}
	if n := countLogged(n1.logs.String(), "refused a message whose sender is not proven", "agg-1"); n != 1 {
		t.Errorf("n1 logged %d refusals of the spoofed resume, want 1\n%s", n, n1.logs.String())
	}
	if n := countLogged(n2.logs.String(), "refused a message whose sender is not proven", "nobody"); n != 1 {
		t.Errorf("n2 logged %d refusals of the spoofed drain, want 1", n)
	}

	t.Run("forget and handover from a non-aggregator refused", func(t *testing.T) {
		n2.stop()
		agg.waitNode(t, "n2", "gone", 20*time.Second, func(n node) bool { return n.State == "unreachable" })
		before := viewOf(t, agg)
		r.send("agg-1", &gwpb.Envelope{From: "agg-2", Body: &gwpb.Envelope_Forget{Forget: &gwpb.Forget{Names: []string{"n2"}, By: "spoofed"}}}, true)
		var gone []*gwpb.GoneMember
		for i := range 20000 {
			gone = append(gone, &gwpb.GoneMember{Name: fmt.Sprintf("phantom%05d", i), SinceMs: time.Now().UnixMilli(),
				Meta: &gwpb.Meta{Role: gwpb.Role_ROLE_AGENT, State: gwpb.State_STATE_DOWN, Reason: "phantom"}})
		}
		r.send("agg-1", &gwpb.Envelope{From: "agg-2", Body: &gwpb.Envelope_Handover{Handover: &gwpb.Handover{Gone: gone}}}, false)
		agg.loopRound(t, c.token)
		if after := viewOf(t, agg); after != before {
			t.Errorf("the view changed:\nbefore %s\nafter  %s", before, after)
		}
		if n := countLogged(agg.logs.String(), "refused a message whose sender is not proven", "agg-2"); n != 1 {
			t.Errorf("aggregator logged %d refusals claiming agg-2, want 1", n)
		}
	})

	actionsAfter, _ := os.ReadFile(actions)
	drainedAfter, _ := os.ReadFile(filepath.Join(c.dir, "agg-1-state", "drained.json"))
	if string(actionsAfter) != string(actionsBefore) {
		t.Errorf("actuators ran: %q, before %q", actionsAfter, actionsBefore)
	}
	if string(drainedAfter) != string(drainedBefore) || !strings.Contains(string(drainedAfter), "n1") {
		t.Errorf("drained set changed: %s, before %s", drainedAfter, drainedBefore)
	}
}

// A drain sent to an agent that is stopped (SIGSTOP) times out for its
// caller; when the agent continues, it does not apply it.
func TestControlAfterItsDeadline(t *testing.T) {
	c := newCluster(t)
	agg := c.addAggregator("agg-1")
	n1 := c.addAgent("n1")
	agg.waitNode(t, "n1", "up", 15*time.Second, func(n node) bool { return n.State == "up" })
	pid := n1.cmd.Process.Pid
	// Stopped, not only signalled: a thread still running when the
	// signal is queued could take the drain first (seen on a loaded
	// machine: the drain applied 1 ms after it was sent).
	testutil.Freeze(t, pid)
	start := time.Now()
	code, body := agg.post(t, "/v1/nodes/n1/drain", c.token, `{"reason":"while stopped"}`)
	waited := time.Since(start)
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code != http.StatusGatewayTimeout {
		t.Fatalf("drain of a stopped agent: %d %s, want 504", code, body)
	}
	t.Logf("the caller was told 504 after %v", waited.Round(time.Millisecond))
	if !testutil.Poll(30*time.Second, func() bool {
		return strings.Contains(n1.logs.String(), "control refused: it arrived after its deadline")
	}) {
		t.Fatalf("n1 did not refuse the late drain:\n%s", n1.logs.String())
	}
	// n1 answers its refusal after it logged it; the aggregator, which no
	// longer waits for it, logs that it came (and its loop has handled
	// whatever came before).
	testutil.Eventually(t, 30*time.Second, "the aggregator to get n1's late answer", func() bool {
		return logged(agg.proc, `"msg":"control ack without a waiting request (late or foreign)"`, `"node":"n1"`)
	})
	agg.loopRound(t, c.token)
	if st := n1.status(); st.State != "up" {
		t.Fatalf("n1 applied a drain its caller was told timed out: %s %q", st.State, st.Reason)
	}
	if n, _ := agg.node(t, "n1"); n.State != "up" {
		t.Fatalf("served %s %q, want up", n.State, n.Reason)
	}
}

// Node restriction's rollout, step 1 and 2 (packaging/README.md): the
// aggregator has its site key and allow_unsigned, n1 already proves
// itself, n2 has no key yet. Both are served and commanded; /readyz and
// the logs say node restriction is off; n1, having proven itself, cannot
// be impersonated by an unsigned update, while n2 still can (what the
// opt-out means).
func TestNodeRestrictionRollout(t *testing.T) {
	c := newCluster(t)
	c.aggAllowUnsigned = true
	c.keyless = map[string]bool{"n2": true}
	agg := c.addAggregator("agg-1")
	n1, n2 := c.addAgent("n1"), c.addAgent("n2")
	c.waitAllUp(t, agg)
	for _, a := range []*agent{n1, n2} {
		if code, body := agg.post(t, "/v1/nodes/"+a.node+"/drain", c.token, `{"reason":"rollout"}`); code != 200 {
			t.Fatalf("drain %s: %d %s", a.node, code, body)
		}
		if st := a.status(); st.State != "down" {
			t.Fatalf("%s not drained: %s", a.node, st.State)
		}
	}
	resp, err := http.Get(agg.url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var rd struct {
		NodeRestriction bool   `json:"node_restriction"`
		Detail          string `json:"detail"`
	}
	json.NewDecoder(resp.Body).Decode(&rd)
	resp.Body.Close()
	if rd.NodeRestriction || !strings.Contains(rd.Detail, "node restriction is off") {
		t.Errorf("/readyz %+v: want node_restriction false and a warning", rd)
	}
	for _, p := range []*proc{agg.proc, n2.proc} {
		if !strings.Contains(p.logs.String(), "node restriction is off") {
			t.Errorf("%s did not warn at start that node restriction is off", p.name)
		}
	}

	r := c.joinRogue(t, "rogue", encodeMeta(t, &gwpb.Meta{Role: gwpb.Role_ROLE_AGENT}, nil))
	testutil.Eventually(t, 30*time.Second, "agg-1 to take the rogue as a member", func() bool {
		return logged(agg.proc, `"msg":"member joined"`, `"node":"rogue"`)
	})
	r.send("agg-1", stateEnv("n1", gwpb.State_STATE_UP, 1000, ""), false)
	r.send("agg-1", stateEnv("n2", gwpb.State_STATE_UP, 1000, ""), false)
	// Both were taken or refused as r.send returned (handledStreams), n1's
	// first; what was taken, the loop has processed after this.
	agg.loopRound(t, c.token)
	if n, _ := agg.node(t, "n1"); n.State != "down" {
		t.Errorf("n1 (proven before) after an unsigned update: %s, want down", n.State)
	}
	if n, _ := agg.node(t, "n2"); n.State != "up" {
		t.Errorf("n2 (no key) after an unsigned update: %s: allow_unsigned is expected to let it through", n.State)
	}
}

// waitFile waits (bounded) until path holds want.
func waitFile(t *testing.T, path, want string) {
	t.Helper()
	const timeout = 30 * time.Second
	b, _, ok := testutil.PollRead(timeout, func() ([]byte, error) { return os.ReadFile(path) },
		func(b []byte) bool { return strings.Contains(string(b), want) })
	if !ok {
		t.Fatalf("%s: no %q within %v (has %q)", path, want, timeout, b)
	}
}
