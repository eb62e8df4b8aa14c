package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gracewatch/gracewatch/aggregator/actuate"
	"github.com/gracewatch/gracewatch/aggregator/advisor"
	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/history"
	"github.com/gracewatch/gracewatch/aggregator/incident"
	"github.com/gracewatch/gracewatch/aggregator/reservation"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/aggregator/watch"
	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/internal/testutil/apispec"
)

// Every test stops the servers it starts; goleak proves it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testTimeout bounds every wait of the tests.
const testTimeout = 30 * time.Second

// The tokens of the tests: testToken the admin one, testReadToken the read
// one.
const (
	testToken     = "s3cret-token-0123456789"
	testReadToken = "r3ad-token-0123456789"
)

// t0 is the fake clock's start.
var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// fakeService is a Service of set answers, for the tests of the HTTP edge
// alone: its nodes are what add put there, its node actions succeed (or
// fail with actErr) and change nothing. Safe for concurrent use.
type fakeService struct {
	clk *clock.Fake

	mu    sync.Mutex
	nodes map[string]view.Node
	// actErr is the error of Resume, Drain and Forget; nil: they succeed
	// on a node of nodes, and fail with NotFound on any other.
	actErr error
	// confirmErr is ConfirmIncident's error; nil: NotFound.
	confirmErr error
}

var _ Service = (*fakeService)(nil)

func newFakeService(clk *clock.Fake) *fakeService {
	return &fakeService{clk: clk, nodes: map[string]view.Node{}}
}

// add puts n, up since the clock's now, in the view.
func (f *fakeService) add(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nodes[name] = view.Node{Name: name, State: view.StateUp, Since: f.clk.Now(), Schedulable: true, Member: "alive"}
}

func (f *fakeService) Name() string         { return "agg-test" }
func (f *fakeService) Grace() time.Duration { return time.Minute }
func (f *fakeService) Now() time.Time       { return f.clk.Now() }
func (f *fakeService) ClusterConfig() api.ClusterConfig {
	return api.ClusterConfig{Grace: 60, Mode: "enforce"}
}

func (f *fakeService) NodesIn(want view.State) []view.Node {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []view.Node
	for _, n := range f.nodes {
		if want == "" || n.State == want {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b view.Node) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (f *fakeService) Node(name string) (view.Node, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.nodes[name]
	return n, ok
}

func (f *fakeService) Aggregators() ([]api.AggregatorInfo, string) {
	return []api.AggregatorInfo{{Name: f.Name()}}, f.Name()
}

func (f *fakeService) Ready() api.Readiness { return api.Readiness{Ready: true, MeshJoined: true} }

// Subscribe starts every watcher from a snapshot of the nodes; no event
// follows.
func (f *fakeService) Subscribe(string) *watch.Subscription {
	sub := watch.NewSubscription(16, &f.mu, func(*watch.Subscription) {})
	sub.Snapshot = f.NodesIn("")
	sub.SnapshotID = "1-0"
	return sub
}

func (f *fakeService) act(node string) (view.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.actErr != nil {
		return view.Node{}, f.actErr
	}
	n, ok := f.nodes[node]
	if !ok {
		return view.Node{}, &Error{Failure: NotFound, Err: errUnknownNode}
	}
	return n, nil
}

func (f *fakeService) Resume(_ context.Context, node, _, _ string) (view.Node, error) {
	return f.act(node)
}
func (f *fakeService) Drain(_ context.Context, node, _, _ string) (view.Node, error) {
	return f.act(node)
}
func (f *fakeService) Forget(_ context.Context, name, _ string) error {
	_, err := f.act(name)
	return err
}

func (f *fakeService) RegisterJobOnNodes(_ context.Context, req api.JobRequest, nodes []string, _ string) api.JobResult {
	res := api.JobResult{Job: req.Job, Registered: len(nodes)}
	for _, n := range nodes {
		res.Nodes = append(res.Nodes, api.JobNodeResult{Node: n, OK: true})
	}
	return res
}

func (f *fakeService) Reservations() (reservation.Status, bool) { return reservation.Status{}, false }

func (f *fakeService) Incidents() ([]incident.Incident, actuate.LimitStatus) {
	return nil, actuate.LimitStatus{}
}

func (f *fakeService) ConfirmIncident(uint64, string, string, time.Duration) (actuate.ConfirmScope, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.confirmErr != nil {
		return actuate.ConfirmScope{}, f.confirmErr
	}
	return actuate.ConfirmScope{}, &Error{Failure: NotFound, Err: errUnknownIncident}
}

func (f *fakeService) AutoResume() bool { return false }
func (f *fakeService) Leading() bool    { return true }

func (f *fakeService) Advise(advisor.Query) (*advisor.Advice, error) { return nil, history.ErrOff }
func (f *fakeService) HistoryStats() history.Stats                   { return history.Stats{} }

// The fake's errors, which the Service's own stand for.
var (
	errUnknownNode     = errors.New("unknown node")
	errUnknownIncident = errors.New("unknown incident")
)

// harness is a fakeService on a fake clock, with the servers a test starts
// over it.
type harness struct {
	t   *testing.T
	clk *clock.Fake
	svc *fakeService
}

func newHarness(t *testing.T) *harness {
	clk := clock.NewFake(t0)
	return &harness{t: t, clk: clk, svc: newFakeService(clk)}
}

// member puts the node name, up, in the fake's view.
func (h *harness) member(name string) { h.svc.add(name) }

// advance steps the fake clock by d.
func (h *harness) advance(d time.Duration) { h.clk.Advance(d) }

// serve starts the real HTTP server over h's fake on 127.0.0.1:0 and
// returns its base URL.
func (h *harness) serve(o ServerOptions) string {
	h.t.Helper()
	_, base := h.server(o)
	return base
}

// server is serve that returns the Server too; the test's cleanup shuts
// it down.
func (h *harness) server(o ServerOptions) (*Server, string) {
	h.t.Helper()
	if o.Clock == nil {
		o.Clock = h.clk
	}
	if o.Logger == nil {
		o.Logger = testLogger(h.t)
	}
	srv := NewServer(h.svc, o)
	return srv, testutil.ServeLocal(h.t, srv, testTimeout)
}

// testLogger discards: the fake's tests check answers, not logs.
func testLogger(testing.TB) *slog.Logger { return slog.New(slog.DiscardHandler) }

// call makes a real request and validates the answer against
// proto/openapi.yaml (apispec.Call).
func call(t testing.TB, method, url, token, body string) apispec.Response {
	t.Helper()
	return apispec.Call(t, testTimeout, method, url, token, body)
}
