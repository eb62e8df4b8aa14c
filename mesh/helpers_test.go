package mesh

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/config"
	"github.com/gracewatch/gracewatch/internal/testutil"
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
		for end := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if err = goleak.Find(); err == nil || time.Now().After(end) {
				break
			}
		}
		if err != nil {
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

// never fails the test if cond holds at any poll during d.
func never(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if cond() {
			t.Fatalf("%s", what)
		}
	}
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
