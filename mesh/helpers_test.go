package mesh

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/config"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/internal/testutil/rogue"
	"github.com/gracewatch/gracewatch/proto/gwpb"
	"go.uber.org/goleak"
)

// Every test here stops the meshes it starts; goleak proves it. memberlist's
// Shutdown does not wait for a probe in flight, which ends within a probe
// interval (scaled by its health awareness): hence the patience.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		var err error
		if !testutil.Poll(20*time.Second, func() bool { err = goleak.Find(); return err == nil }) {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// recorder is a Handler that keeps everything it hears.
type recorder struct {
	mu      sync.Mutex
	msgs    []received
	changes []Member
}

type received struct {
	from string
	env  *gwpb.Envelope
}

var _ Handler = (*recorder)(nil)

func (r *recorder) HandleMessage(from string, env *gwpb.Envelope) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, received{from, env})
}

func (r *recorder) MemberChanged(m Member) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changes = append(r.changes, m)
}

func (r *recorder) messages() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.msgs...)
}

// changesOf returns the MemberChanged calls about name, in order.
func (r *recorder) changesOf(name string) []Member {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Member
	for _, m := range r.changes {
		if m.Name == name {
			out = append(out, m)
		}
	}
	return out
}

// node is a started test mesh with its handler and log.
type node struct {
	*Mesh
	rec  *recorder
	logs *testutil.SyncBuffer
}

// testConfig is a loopback, insecure, fast configuration.
func testConfig() Config {
	return Config{Bind: "127.0.0.1:0", Label: "gracewatch-test", Insecure: true}
}

// start starts a mesh on loopback with the "local" profile; mod may adjust
// the options. The mesh is shut down when the test ends, and its log shown
// if the test failed.
func start(t testing.TB, name string, role gwpb.Role, mod func(*Options)) *node {
	t.Helper()
	n, err := tryStart(t, name, role, mod)
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	return n
}

func tryStart(t testing.TB, name string, role gwpb.Role, mod func(*Options)) (*node, error) {
	t.Helper()
	rec := &recorder{}
	logs := &testutil.SyncBuffer{}
	o := Options{
		Name:    name,
		Role:    role,
		Config:  testConfig(),
		Handler: rec,
		Logger:  slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Profile: "local",
	}
	o.Keys = testKeys(t, name, role)
	if mod != nil {
		mod(&o)
	}
	m, err := New(o)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		if err := m.Shutdown(); err != nil {
			t.Errorf("shutdown %s: %v", name, err)
		}
		if t.Failed() {
			t.Logf("log of %s:\n%s", name, logs.String())
		}
	})
	return &node{Mesh: m, rec: rec, logs: logs}, nil
}

// testSite is the site key of the tests' cluster.
var testSite = bytes.Repeat([]byte("gracewatch-test-site-key "), 2)

// testKeys returns what a member of role named name holds in the tests'
// cluster: an aggregator the site key, an agent its node key and the
// aggregators' public key.
func testKeys(t testing.TB, name string, role gwpb.Role) *Keys {
	t.Helper()
	agg, err := AggregatorKeys([][]byte{testSite})
	if err != nil {
		t.Fatal(err)
	}
	if role == gwpb.Role_ROLE_AGGREGATOR {
		return agg
	}
	k, err := AgentKeys(NodeKey(testSite, name), agg.PublicKeys())
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// unsigned makes a member without keys that accepts unproven input.
func unsigned(o *Options) { o.Keys, o.Config.AllowUnsigned = nil, true }

// joining sets the seeds.
func joining(seeds ...string) func(*Options) {
	return func(o *Options) { o.Config.Join = seeds }
}

// waitFor is testutil.Eventually: cond polled until it holds, the test
// failed after limit. It returns how long it took.
func waitFor(t testing.TB, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	return testutil.Eventually(t, limit, what, cond)
}

// refusedAlive returns how many alive messages m refused for reason (a
// refusalReasons entry): each is counted when it is refused, before
// memberlist's table could take it.
func refusedAlive(m *Mesh, reason string) uint64 {
	i := slices.Index(refusalReasons, reason)
	if i < 0 {
		panic("no refusal reason " + reason)
	}
	return m.refused.n[i].Load()
}

// refusedAliveTotal returns how many alive messages m refused, for any
// reason.
func refusedAliveTotal(m *Mesh) uint64 {
	var n uint64
	for _, r := range refusalReasons {
		n += refusedAlive(m, r)
	}
	return n
}

// packetMarker sends from r to n a genuine message (an ack with id, from an
// agent with its node key) in a user message over UDP, and waits until n's
// Handler has it. memberlist handles the packets of its socket in the
// order they come, and a user message only when no alive message waits:
// once n has it, n has handled every packet r sent before, and every alive
// message among them. It is sent again at each look, in case a full
// socket buffer dropped one.
func packetMarker(t testing.TB, r *rogue.Crafter, n *node, id string) {
	t.Helper()
	msg := rogue.User(forge(t, &gwpb.Envelope{Schema: 1, From: "marker", Body: &gwpb.Envelope_Ack{Ack: &gwpb.ControlAck{Id: id}}},
		testKeys(t, "marker", agent)))
	waitFor(t, 20*time.Second, "the marker "+id, func() bool {
		if err := r.Send(n.Addr(), msg); err != nil {
			t.Fatal(err)
		}
		for _, m := range n.rec.messages() {
			if m.env.GetAck().GetId() == id {
				return true
			}
		}
		return false
	})
}

// droppedMessages returns how many direct messages m dropped before its
// Handler, undecodable or unproven.
func droppedMessages(m *Mesh) uint64 {
	return m.dropped[droppedUndecodable].Load() + m.dropped[droppedUnproven].Load()
}

// member returns name as m sees it.
func member(m *Mesh, name string) (Member, bool) {
	for _, x := range m.Members() {
		if x.Name == name {
			return x, true
		}
	}
	return Member{}, false
}

// statusOf returns name's status as m sees it, "" if unknown.
func statusOf(m *Mesh, name string) Status {
	x, _ := member(m, name)
	return x.Status
}

// sees reports whether m sees every name alive.
func sees(m *Mesh, names ...string) bool {
	for _, n := range names {
		if statusOf(m, n) != StatusAlive {
			return false
		}
	}
	return true
}

// keyFile writes a new key file in a temporary directory.
func keyFile(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "mesh.key")
	if err := WriteKeyFile(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func dur(d time.Duration) config.Duration { return config.Dur(d) }

func contains(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}
