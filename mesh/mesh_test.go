package mesh

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/proto/gwpb"
	"github.com/hashicorp/memberlist"
	"google.golang.org/protobuf/proto"
)

const (
	agent = gwpb.Role_ROLE_AGENT
	aggr  = gwpb.Role_ROLE_AGGREGATOR
)

// Three members in one process: metas spread, direct messages arrive both
// ways, garbage is dropped and logged.
func TestThreeMembers(t *testing.T) {
	t.Parallel()
	agg := start(t, "agg-1", aggr, nil)
	a1 := start(t, "node1", agent, func(o *Options) {
		o.Config.Join = []string{agg.Addr()}
		o.Meta = &gwpb.Meta{Role: aggr, Incarnation: 1, State: gwpb.State_STATE_UP} // Role is forced
	})
	a2 := start(t, "node2", agent, joining(agg.Addr()))
	for _, n := range []*node{agg, a1, a2} {
		if !n.Joined() {
			t.Errorf("%s: Joined() = false after New", n.Name())
		}
		waitFor(t, 10*time.Second, n.Name()+" sees all three", func() bool { return sees(n.Mesh, "agg-1", "node1", "node2") })
	}
	if m, _ := member(agg.Mesh, "node1"); m.Role != agent || m.Meta.GetIncarnation() != 1 || m.Meta.GetSchema() != gwpb.SchemaVersion {
		t.Errorf("node1's initial meta as agg-1 sees it: role %v, meta %v", m.Role, m.Meta)
	}
	if got := agg.NumMembers(); got != 3 {
		t.Errorf("NumMembers = %d, want 3", got)
	}

	t.Run("meta", func(t *testing.T) {
		want := &gwpb.Meta{Schema: gwpb.SchemaVersion, Role: agent, Incarnation: 1, Seq: 7,
			State: gwpb.State_STATE_TEARDOWN, FreeAtMs: 1_700_000_060_000, DeadlineMs: 1_700_000_060_000,
			SinceMs: 1_700_000_000_000, Reason: "epilogue"}
		begin := time.Now()
		if err := a1.SetMeta(want); err != nil {
			t.Fatal(err)
		}
		// An agent does not decode another agent's meta (it has no use
		// for it): the aggregator sees it.
		for _, n := range []*node{agg} {
			took := waitFor(t, 10*time.Second, n.Name()+" sees node1's new meta", func() bool {
				m, _ := member(n.Mesh, "node1")
				return proto.Equal(m.Meta, want)
			})
			t.Logf("%s saw the meta update after %v (SetMeta returned after %v)", n.Name(), took, time.Since(begin)-took)
			waitFor(t, time.Second, n.Name()+"'s MemberChanged", func() bool {
				ch := n.rec.changesOf("node1")
				return len(ch) > 0 && proto.Equal(ch[len(ch)-1].Meta, want) && ch[len(ch)-1].Status == StatusAlive
			})
		}
	})

	t.Run("an agent keeps no other agent's meta", func(t *testing.T) {
		if m, _ := member(a2.Mesh, "node1"); m.Meta != nil || m.Role != agent || m.Status != StatusAlive {
			t.Errorf("node1 as node2 sees it: %+v, want an alive agent without its meta", m)
		}
	})

	t.Run("agent to aggregators", func(t *testing.T) {
		env := &gwpb.Envelope{Body: &gwpb.Envelope_State{State: &gwpb.StateUpdate{Reason: "hung epilogue"}}}
		sent, err := a1.SendToRole(aggr, env)
		if sent != 1 || err != nil {
			t.Fatalf("SendToRole = %d, %v; want 1, nil", sent, err)
		}
		waitFor(t, 5*time.Second, "agg-1 receives the state update", func() bool { return len(agg.rec.messages()) == 1 })
		got := agg.rec.messages()[0]
		if got.from != "node1" || got.env.GetFrom() != "node1" || got.env.GetSchema() != gwpb.SchemaVersion ||
			got.env.GetState().GetReason() != "hung epilogue" {
			t.Errorf("received from %q: %v", got.from, got.env)
		}
		if n, err := a1.SendToRole(gwpb.Role_ROLE_UNSPECIFIED, env); n != 0 || err != nil {
			t.Errorf("SendToRole(no such member) = %d, %v; want 0, nil", n, err)
		}
	})

	t.Run("aggregator to agent", func(t *testing.T) {
		env := &gwpb.Envelope{Body: &gwpb.Envelope_Control{Control: &gwpb.Control{Id: "c1", Action: gwpb.Action_ACTION_RESUME}}}
		if err := agg.Send("node2", env); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "node2 receives the control", func() bool { return len(a2.rec.messages()) == 1 })
		if got := a2.rec.messages()[0]; got.from != "agg-1" || got.env.GetControl().GetId() != "c1" {
			t.Errorf("received from %q: %v", got.from, got.env)
		}
		err := agg.Send("node9", env)
		if !errors.Is(err, ErrUnknownMember) || !strings.Contains(err.Error(), "node9") {
			t.Errorf("Send(node9) = %v, want ErrUnknownMember naming node9", err)
		}
	})

	t.Run("undecodable message", func(t *testing.T) {
		before := len(agg.rec.messages())
		to := &memberlist.Node{Name: "agg-1"}
		m, _ := member(a2.Mesh, "agg-1")
		a2.mu.Lock()
		st := a2.members["agg-1"]
		to.Addr, to.Port = st.ip, st.port
		a2.mu.Unlock()
		// Field 2 (from) readable, then a truncated field 10.
		garbage := []byte{0x12, 0x05, 'n', 'o', 'd', 'e', '2', 0x52, 0x40, 0x01}
		for range 3 {
			if err := a2.ml.SendReliable(to, garbage); err != nil {
				t.Fatalf("send garbage to %s: %v", m.Addr, err)
			}
		}
		ok := &gwpb.Envelope{Body: &gwpb.Envelope_Ack{Ack: &gwpb.ControlAck{Id: "after"}}}
		if err := a2.Send("agg-1", ok); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "the message after the garbage", func() bool { return len(agg.rec.messages()) == before+1 })
		if got := agg.rec.messages()[before]; got.env.GetAck().GetId() != "after" {
			t.Errorf("got %v, want the ack", got.env)
		}
		logs := agg.logs.String()
		if !contains(logs, "dropped undecodable message", "from=node2") {
			t.Errorf("no log of the undecodable message:\n%s", logs)
		}
		if n := strings.Count(logs, "dropped undecodable message"); n != 1 {
			t.Errorf("%d log lines for 3 undecodable messages from one sender, want 1 (rate limit)", n)
		}
	})
}

// A member that leaves is seen as left.
func TestLeave(t *testing.T) {
	t.Parallel()
	a := start(t, "a", aggr, nil)
	b := start(t, "b", agent, joining(a.Addr()))
	c := start(t, "c", agent, joining(a.Addr()))
	for _, n := range []*node{a, b} {
		waitFor(t, 10*time.Second, n.Name()+" sees c", func() bool { return sees(n.Mesh, "c") })
	}
	begin := time.Now()
	if err := c.Leave(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("Leave took %v", time.Since(begin))
	if statusOf(c.Mesh, "c") != StatusLeft {
		t.Errorf("c sees itself %q, want left", statusOf(c.Mesh, "c"))
	}
	for _, n := range []*node{a, b} {
		waitFor(t, 5*time.Second, n.Name()+" sees c left", func() bool { return statusOf(n.Mesh, "c") == StatusLeft })
		// The mesh records the status before it tells the Handler: wait
		// for the Handler too.
		lastChange := func() Member {
			if ch := n.rec.changesOf("c"); len(ch) > 0 {
				return ch[len(ch)-1]
			}
			return Member{}
		}
		waitFor(t, 5*time.Second, n.Name()+" is told c left", func() bool { return lastChange().Status == StatusLeft })
		// (an agent does not decode another agent's meta)
		if last := lastChange(); (last.Meta == nil && n == a) || last.Role != agent {
			t.Errorf("%s: last MemberChanged(c) = %+v, want left with its meta", n.Name(), last)
		}
	}
	if err := c.SetMeta(&gwpb.Meta{}); !errors.Is(err, ErrClosed) {
		t.Errorf("SetMeta after Leave = %v, want ErrClosed", err)
	}
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := c.Shutdown(); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	if err := c.Leave(time.Second); !errors.Is(err, ErrClosed) {
		t.Errorf("Leave after Shutdown = %v, want ErrClosed", err)
	}
	// memberlist's word that a member left is no proof (anyone with the
	// mesh key can forge it): a send is still tried, at its address.
	if err := a.Send("c", &gwpb.Envelope{}); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Send to a left member = %v, want it tried (connection refused)", err)
	}
	// c stays left after it is gone and a send to it failed: memberlist
	// neither probes a member that left nor takes a dead message about one,
	// and c, shut down, sends nothing more; the failed send is the last
	// thing that could have changed it.
	if st := statusOf(a.Mesh, "c"); st != StatusLeft {
		t.Errorf("c is %q after leaving and a failed send, want left", st)
	}
	if err := a.Send("never-seen", &gwpb.Envelope{}); !errors.Is(err, ErrUnknownMember) {
		t.Errorf("Send to a member never seen = %v, want ErrUnknownMember", err)
	}
}

// A member that stops without leaving is declared dead within the "local"
// profile's suspicion time; started again under the same name and address
// it is alive again.
func TestDeadAndBack(t *testing.T) {
	t.Parallel()
	a := start(t, "a", aggr, nil)
	b := start(t, "b", agent, func(o *Options) {
		o.Config.Join = []string{a.Addr()}
		o.Meta = &gwpb.Meta{Incarnation: 1}
	})
	waitFor(t, 10*time.Second, "a sees b", func() bool { return sees(a.Mesh, "b") })
	addr := b.Addr()
	if err := b.Shutdown(); err != nil {
		t.Fatal(err)
	}
	// Local profile: probe every 1 s, suspicion at least 3 s; with two
	// members no confirmation is awaited.
	took := waitFor(t, 15*time.Second, "a sees b dead", func() bool { return statusOf(a.Mesh, "b") == StatusDead })
	t.Logf("dead member detected after %v (profile local)", took)
	ch := a.rec.changesOf("b")
	if last := ch[len(ch)-1]; last.Status != StatusDead || last.Since.IsZero() {
		t.Errorf("last MemberChanged(b) = %+v, want dead", last)
	}

	b2 := start(t, "b", agent, func(o *Options) {
		o.Config.Bind = addr
		o.Config.Join = []string{a.Addr()}
		o.Meta = &gwpb.Meta{Incarnation: 2}
	})
	took = waitFor(t, 10*time.Second, "a sees b back", func() bool {
		m, _ := member(a.Mesh, "b")
		return m.Status == StatusAlive && m.Meta.GetIncarnation() == 2
	})
	t.Logf("returning member alive after %v", took)
	ch = a.rec.changesOf("b")
	if last := ch[len(ch)-1]; last.Status != StatusAlive || last.Meta.GetIncarnation() != 2 {
		t.Errorf("last MemberChanged(b) = %+v, want alive, incarnation 2", last)
	}
	waitFor(t, 5*time.Second, "b sees a", func() bool { return sees(b2.Mesh, "a") })
}

// The rejoin loop merges a member with a seed that was down when it
// started, without any manual Join: b knows no seed, a has never seen b.
func TestRejoin(t *testing.T) {
	t.Parallel()
	// Take a free port for b, then free it again: b is "isolated".
	b0 := start(t, "b", aggr, nil)
	addr := b0.Addr()
	if err := b0.Shutdown(); err != nil {
		t.Fatal(err)
	}
	a := start(t, "a", agent, func(o *Options) {
		o.Config.Join = []string{addr}
		o.Config.RejoinInterval = dur(200 * time.Millisecond)
	})
	if a.Joined() {
		t.Fatal("a joined a seed that is down")
	}
	if !strings.Contains(a.logs.String(), "cannot join any seed") {
		t.Errorf("the failed first join is not logged:\n%s", a.logs.String())
	}
	b := start(t, "b", aggr, func(o *Options) { o.Config.Bind = addr })
	took := waitFor(t, 5*time.Second, "a and b merge", func() bool {
		return a.Joined() && sees(a.Mesh, "b") && sees(b.Mesh, "a")
	})
	t.Logf("merged %v after b came up (rejoin interval 200ms)", took)
	if !strings.Contains(a.logs.String(), "joined the mesh") {
		t.Errorf("the rejoin is not logged")
	}
}

// Members that do not share the key, the encryption or the label never
// merge, however they try; the same setups with matching settings do.
func TestIsolation(t *testing.T) {
	t.Parallel()
	key1, key2 := keyFile(t), keyFile(t)
	secure := func(key string) func(*Options) {
		return func(o *Options) { o.Config.Insecure, o.Config.Keyring = false, key }
	}
	label := func(l string) func(*Options) { return func(o *Options) { o.Config.Label = l } }
	cases := []struct {
		name      string
		a, b      func(*Options)
		wantMerge bool
	}{
		{"same key", secure(key1), secure(key1), true},
		{"different keys", secure(key1), secure(key2), false},
		{"encrypted seed, insecure joiner", secure(key1), nil, false},
		{"insecure seed, encrypted joiner", nil, secure(key1), false},
		{"same label", label("site-a"), label("site-a"), true},
		{"different labels", label("site-a"), label("site-b"), false},
		{"different labels, same key", func(o *Options) { secure(key1)(o); label("site-a")(o) },
			func(o *Options) { secure(key1)(o); label("site-b")(o) }, false},
	}
	// All pairs run at once, so that the negative cases share one window.
	type pair struct{ a, b *node }
	pairs := make([]pair, len(cases))
	for i, tc := range cases {
		a := start(t, "a", aggr, tc.a)
		b := start(t, "b", agent, func(o *Options) {
			if tc.b != nil {
				tc.b(o)
			}
			o.Config.Join = []string{a.Addr()}
			o.Config.RejoinInterval = dur(200 * time.Millisecond)
		})
		pairs[i] = pair{a, b}
	}
	merged := func(p pair) bool {
		_, ab := member(p.a.Mesh, "b")
		_, ba := member(p.b.Mesh, "a")
		return ab || ba || p.a.NumMembers() > 1 || p.b.NumMembers() > 1
	}
	for i, tc := range cases {
		if p := pairs[i]; tc.wantMerge {
			waitFor(t, 5*time.Second, tc.name+": merge", func() bool { return p.b.Joined() && sees(p.a.Mesh, "b") && sees(p.b.Mesh, "a") })
		}
	}
	// A join that fails is tried again every RejoinInterval: once a has
	// taken three streams from b (each attempt is one, and b tries again
	// only after a ended the one before), b has tried, failed and tried
	// again; then neither holds the other.
	for i, tc := range cases {
		if p := pairs[i]; !tc.wantMerge {
			waitFor(t, 20*time.Second, tc.name+": three join attempts", func() bool {
				return strings.Count(p.a.logs.String(), "Stream connection") >= 3
			})
		}
	}
	for i, tc := range cases {
		if p := pairs[i]; !tc.wantMerge && merged(p) {
			t.Fatalf("%s: merged", tc.name)
		}
	}
	for i, tc := range cases {
		if !tc.wantMerge && pairs[i].b.Joined() {
			t.Errorf("%s: Joined() = true", tc.name)
		}
	}
}

func TestShutdownWithoutSeedsAndSendAfter(t *testing.T) {
	t.Parallel()
	a := start(t, "a", aggr, func(o *Options) { o.Profile = "lan" })
	if !a.Joined() {
		t.Error("Joined() = false without seeds")
	}
	if m, ok := member(a.Mesh, "a"); !ok || m.Status != StatusAlive || m.Role != aggr || m.Addr != a.Addr() {
		t.Errorf("a sees itself as %+v", m)
	}
	if err := a.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := a.Send("a", &gwpb.Envelope{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Send after Shutdown = %v, want ErrClosed", err)
	}
}

func TestNewRefuses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		mod  func(*Options)
		want string
	}{
		{"empty name", func(o *Options) { o.Name = "" }, "name: invalid node name: empty"},
		{"bad profile", func(o *Options) { o.Profile = "wan" }, `profile "wan"`},
		{"bad config", func(o *Options) { o.Config.Insecure = false }, `key "mesh.keyring": required`},
		{"missing key file", func(o *Options) { o.Config.Insecure, o.Config.Keyring = false, "/nonexistent/key" }, "/nonexistent/key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tryStart(t, "x", agent, tc.mod)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// An aggregator joins, by itself, a member it saw die that came back
// without joining anyone: the member cut off by a partition that still
// holds the aggregator alive has no missing seed to rejoin, and the
// aggregator forgot it.
func TestAggregatorRejoinsTheDead(t *testing.T) {
	t.Parallel()
	a := start(t, "a", aggr, func(o *Options) { o.Config.RejoinInterval = dur(200 * time.Millisecond) })
	b := start(t, "b", agent, joining(a.Addr()))
	waitFor(t, 10*time.Second, "a sees b", func() bool { return sees(a.Mesh, "b") })
	addr := b.Addr()
	if err := b.Shutdown(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "a sees b dead", func() bool { return statusOf(a.Mesh, "b") == StatusDead })
	// b comes back at the same address and joins no one.
	b2 := start(t, "b", agent, func(o *Options) {
		o.Config.Bind = addr
		o.Meta = &gwpb.Meta{Incarnation: 2}
	})
	took := waitFor(t, 5*time.Second, "a and b merge", func() bool {
		m, _ := member(a.Mesh, "b")
		return m.Status == StatusAlive && m.Meta.GetIncarnation() == 2 && sees(b2.Mesh, "a")
	})
	t.Logf("merged %v after b came back (rejoin interval 200ms)", took)
	if !strings.Contains(a.logs.String(), "rejoined a member that was dead") {
		t.Error("the rejoin is not logged")
	}
}
