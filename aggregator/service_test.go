package aggregator

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/meshfake"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// testTimeout bounds every wait of these tests.
const testTimeout = 10 * time.Second

// harness is a running Service on a fake mesh and a fake clock.
// The fake of the mesh the tests run the Service on is one.
var _ Mesh = (*meshfake.Mesh)(nil)

type harness struct {
	t    *testing.T
	clk  *clock.Fake
	svc  *Service
	mesh *meshfake.Mesh
}

func newHarness(t *testing.T, opts ...func(*Options)) *harness {
	t.Helper()
	return newHarnessClock(t, clock.NewFake(t0), opts...)
}

func newHarnessClock(t *testing.T, clk *clock.Fake, opts ...func(*Options)) *harness {
	t.Helper()
	o := Options{Name: "agg-1", Policy: defaultPolicy, Grace: 120 * time.Second, Clock: clk, Logger: testLogger(t)}
	for _, f := range opts {
		f(&o)
	}
	h, _ := startHarness(t, clk, o)
	return h
}

// startHarness runs a Service of o on a meshfake.Mesh until stop (or the test's
// end) and returns once it has processed its start. stop ends it once (a
// later call does nothing) and fails the test if Run failed or did not
// return within testTimeout.
func startHarness(t *testing.T, clk *clock.Fake, o Options) (h *harness, stop func()) {
	t.Helper()
	svc, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	h = &harness{t: t, clk: clk, svc: svc, mesh: meshfake.New(svc, svc.clock.Now)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx, h.mesh) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(testTimeout):
				t.Error("Run did not return")
			}
		})
	}
	t.Cleanup(stop)
	h.sync()
	return h, stop
}

// sync waits until the Service has processed every input so far.
func (h *harness) sync() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := h.svc.Sync(ctx); err != nil {
		h.t.Fatalf("Sync: %v", err)
	}
}

// member sets an alive agent publishing meta and waits for it.
func (h *harness) member(name string, meta *gwpb.Meta) {
	h.mesh.SetMember(meshfake.AgentMember(name, meta, h.clk.Now()))
	h.sync()
}

// update delivers a StateUpdate from name and waits for it.
func (h *harness) update(name string, u *gwpb.StateUpdate) {
	h.mesh.Deliver(name, &gwpb.Envelope{Body: &gwpb.Envelope_State{State: u}})
	h.sync()
}

// status changes a member's status and waits for it.
func (h *harness) status(name string, st mesh.Status) {
	for _, m := range h.mesh.Members() {
		if m.Name == name {
			m.Status, m.Since = st, h.clk.Now()
			h.mesh.SetMember(m)
		}
	}
	h.sync()
}

// advance steps the fake clock and waits for what its timers started.
func (h *harness) advance(d time.Duration) {
	h.clk.Advance(d)
	h.sync()
}

func (h *harness) node(name string) view.Node {
	h.t.Helper()
	n, ok := h.svc.Node(name)
	if !ok {
		h.t.Fatalf("no node %s", name)
	}
	return n
}

func (h *harness) wantState(name string, want view.State) view.Node {
	h.t.Helper()
	n := h.node(name)
	if n.State != want {
		h.t.Fatalf("%s: state %s (%s), want %s", name, n.State, n.Reason, want)
	}
	return n
}

func TestServiceDeadlineTimer(t *testing.T) {
	h := newHarness(t)
	deadline := at(2 * time.Minute)
	h.member("n1", teardownMeta(1, 2, deadline))
	h.wantState("n1", view.StateTeardown)
	if got := h.clk.Pending(); got != 1 {
		t.Fatalf("%d timers pending, want the one deadline timer", got)
	}

	h.advance(deadline.Add(5*time.Second - time.Millisecond).Sub(h.clk.Now()))
	h.wantState("n1", view.StateTeardown)
	h.advance(time.Millisecond)
	n := h.wantState("n1", view.StateDown)
	if n.Reason != "no report after teardown deadline 2025-06-01T12:02:00.000Z" || !n.Since.Equal(deadline.Add(5*time.Second)) {
		t.Errorf("down node = %q since %v", n.Reason, n.Since)
	}
	// Nothing polls: with no teardown left, no timer is armed.
	if got := h.clk.Pending(); got != 0 {
		t.Errorf("%d timers pending after the deadline, want 0", got)
	}

	// The agent comes back with a newer state.
	h.member("n1", upMeta(1, 3))
	h.wantState("n1", view.StateUp)
}

func TestServiceTimerFollowsTheEarliestDeadline(t *testing.T) {
	h := newHarness(t)
	h.member("late", teardownMeta(1, 1, at(10*time.Minute)))
	h.member("early", teardownMeta(1, 1, at(time.Minute)))
	if got := h.clk.Pending(); got != 1 {
		t.Fatalf("%d timers pending, want 1", got)
	}
	h.advance(time.Minute + 5*time.Second)
	h.wantState("early", view.StateDown)
	h.wantState("late", view.StateTeardown)
	// A report that ends the late teardown disarms the timer.
	h.member("late", upMeta(1, 2))
	if got := h.clk.Pending(); got != 0 {
		t.Errorf("%d timers pending, want 0", got)
	}
	h.advance(time.Hour)
	h.wantState("late", view.StateUp)
}

func TestServiceDirectUpdates(t *testing.T) {
	h := newHarness(t)
	// A direct update may come before the member event.
	u := &gwpb.StateUpdate{Meta: downMeta(1, 4, "job 9 teardown exceeded gr…"), Reason: "job 9 teardown exceeded grace 120s: hung"}
	h.update("n1", u)
	n := h.wantState("n1", view.StateDown)
	if n.Reason != u.Reason {
		t.Errorf("reason = %q", n.Reason)
	}
	// The gossiped meta of the same state changes nothing.
	h.member("n1", downMeta(1, 4, "job 9 teardown exceeded gr…"))
	if n := h.node("n1"); n.Reason != u.Reason {
		t.Errorf("reason after gossip = %q", n.Reason)
	}
	// An older update delivered late is ignored.
	h.update("n1", &gwpb.StateUpdate{Meta: upMeta(1, 3)})
	h.wantState("n1", view.StateDown)
}

func TestServiceRoles(t *testing.T) {
	h := newHarness(t)
	h.mesh.SetMember(mesh.Member{Name: "agg-0", Role: gwpb.Role_ROLE_AGGREGATOR, Status: mesh.StatusAlive,
		Meta: &gwpb.Meta{Role: gwpb.Role_ROLE_AGGREGATOR}})
	h.mesh.SetMember(mesh.Member{Name: "future", Role: gwpb.Role_ROLE_UNSPECIFIED, Status: mesh.StatusAlive, Meta: &gwpb.Meta{}})
	h.mesh.SetMember(mesh.Member{Name: "garbled", Status: mesh.StatusAlive, MetaErr: errFake("bad varint")})
	h.member("n1", upMeta(1, 1))
	var names []string
	for _, n := range h.svc.Nodes() {
		names = append(names, n.Name)
	}
	if strings.Join(names, ",") != "garbled,n1" {
		t.Errorf("nodes = %v, want garbled,n1 (aggregators and unknown roles are not nodes)", names)
	}
	h.wantState("garbled", view.StateUnreachable)
	aggs, leader := h.svc.Aggregators()
	if len(aggs) != 2 || leader != "agg-0" || !aggs[0].Leader || !aggs[1].Self {
		t.Errorf("aggregators = %+v, leader %q", aggs, leader)
	}
}

type errFake string

func (e errFake) Error() string { return string(e) }

func TestServiceEvents(t *testing.T) {
	h := newHarness(t)
	h.member("n1", upMeta(1, 1))
	sub := h.svc.Subscribe("")
	defer sub.Close()
	if len(sub.Snapshot) != 1 || sub.Snapshot[0].Name != "n1" {
		t.Fatalf("snapshot = %+v", sub.Snapshot)
	}
	h.member("n1", teardownMeta(1, 2, at(time.Minute)))
	h.member("n1", teardownMeta(1, 2, at(time.Minute))) // unchanged: no event
	h.member("n2", upMeta(1, 1))
	var got []string
	for len(got) < 2 {
		select {
		case ev := <-sub.C:
			got = append(got, ev.ID+" "+ev.Node.Name+" "+string(ev.Node.State))
		case <-time.After(testTimeout):
			t.Fatalf("events so far: %v", got)
		}
	}
	select {
	case ev := <-sub.C:
		t.Errorf("unexpected event %+v", ev)
	default:
	}
	e := h.svc.watchers.Epoch()
	want := []string{e + "-2 n1 teardown", e + "-3 n2 up"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("events = %q, want %q", got, want)
	}
	if sub.SnapshotID != e+"-1" {
		t.Errorf("snapshot id = %q", sub.SnapshotID)
	}

	// Resuming from an id of the history gives exactly the missed events.
	again := h.svc.Subscribe(e + "-1")
	defer again.Close()
	if again.Snapshot != nil || len(again.Missed) != 2 || again.Missed[0].Seq != 2 {
		t.Errorf("resume: snapshot %v, missed %+v", again.Snapshot, again.Missed)
	}
	// A foreign id gives a snapshot.
	foreign := h.svc.Subscribe("0badc0de-2")
	defer foreign.Close()
	if foreign.Snapshot == nil || len(foreign.Snapshot) != 2 {
		t.Errorf("foreign id: snapshot %v", foreign.Snapshot)
	}
}

func TestServiceHistoryBound(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.History = 4 })
	for i := uint64(1); i <= 10; i++ {
		h.member("n1", upMeta(1, i)) // seq changes: one event each
	}
	e := h.svc.watchers.Epoch()
	if sub := h.svc.Subscribe(e + "-6"); sub.Snapshot != nil || len(sub.Missed) != 4 {
		t.Errorf("within history: snapshot %v missed %d", sub.Snapshot != nil, len(sub.Missed))
	} else {
		sub.Close()
	}
	sub := h.svc.Subscribe(e + "-5")
	defer sub.Close()
	if sub.Snapshot == nil || sub.Missed != nil {
		t.Errorf("beyond history: want a snapshot, got missed %d", len(sub.Missed))
	}
	future := h.svc.Subscribe(e + "-99")
	defer future.Close()
	if future.Snapshot == nil {
		t.Error("an id from the future: want a snapshot")
	}
}

func TestServiceDropsSlowSubscriber(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.SubscriberBuffer = 2 })
	slow := h.svc.Subscribe("")
	defer slow.Close()
	fast := h.svc.Subscribe("")
	defer fast.Close()
	got := 0
	for i := uint64(1); i <= 5; i++ {
		h.member("n1", upMeta(1, i))
		select {
		case <-fast.C:
			got++
		case <-time.After(testTimeout):
			t.Fatal("the fast subscriber got nothing")
		}
	}
	if got != 5 {
		t.Errorf("fast subscriber got %d events, want 5", got)
	}
	n := 0
	for range slow.C {
		n++
	}
	if !slow.Dropped() || n != 2 {
		t.Errorf("slow subscriber: dropped %v after %d events; want dropped after 2", slow.Dropped(), n)
	}
}

func TestServiceRunStopsSubscriptions(t *testing.T) {
	clk := clock.NewFake(t0)
	h, stop := startHarness(t, clk, Options{Name: "agg-1", Clock: clk})
	svc := h.svc
	sub := svc.Subscribe("")
	stop()
	if _, ok := <-sub.C; ok {
		t.Error("subscription still open after Run returned")
	}
	sub.Close()
	if r := svc.Ready(); r.Ready {
		t.Errorf("ready after stop: %+v", r)
	}
}

// TestServiceUnreachableAfter: a member declared dead that comes back
// within Policy.UnreachableAfter never changes the served view (no event);
// one that stays dead is served unreachable when the window ends, by the
// enforcement timer, and the actuators run once.
func TestServiceUnreachableAfter(t *testing.T) {
	window := 2 * time.Second
	f := newActFixture(t, 0, func(o *Options) {
		o.Policy.UnreachableAfter = window
		o.Policy.UnreachableIsDown = true
	})
	f.member("n1", upMeta(1, 1))
	f.settle()
	sub := f.svc.Subscribe("")
	defer sub.Close()

	// A flap: dead, then alive again 1.9 s later.
	f.status("n1", mesh.StatusDead)
	if got := f.clk.Pending(); got != 1 {
		t.Fatalf("%d timers pending, want the window's", got)
	}
	f.advance(window - 100*time.Millisecond)
	f.wantState("n1", view.StateUp)
	f.status("n1", mesh.StatusAlive)
	f.advance(time.Minute)
	f.settle()
	select {
	case ev := <-sub.C:
		t.Fatalf("event during a flap within the window: %+v", ev.Node)
	default:
	}
	if got := f.clk.Pending(); got != 0 {
		t.Errorf("%d timers pending after the flap, want 0", got)
	}
	f.want(nil, nil)

	// Dead for good: served unreachable (here down) when the window ends.
	went := f.clk.Now()
	f.status("n1", mesh.StatusDead)
	f.advance(window - time.Millisecond)
	f.wantState("n1", view.StateUp)
	f.advance(time.Millisecond)
	n := f.wantState("n1", view.StateDown)
	if mesh.Status(n.Member) != mesh.StatusDead || !n.Since.Equal(went) || !strings.Contains(n.Reason, "the mesh declared the agent dead") {
		t.Errorf("dead member served %s (member %s) since %v: %q; want down since it went", n.State, n.Member, fmtPtr(n.Since), n.Reason)
	}
	select {
	case ev := <-sub.C:
		if ev.Node.State != view.StateDown {
			t.Errorf("event %+v, want down", ev.Node)
		}
	case <-time.After(testTimeout):
		t.Fatal("no event when the window ended")
	}
	f.advance(time.Minute)
	f.settle()
	f.want([]string{"n1 unreachable since 2025-06-01T12:01:01.900Z: the mesh declared the agent dead"}, nil)
	select {
	case ev := <-sub.C:
		t.Errorf("unexpected event %+v", ev.Node)
	default:
	}
}

// TestServiceUpdatesOutOfOrder: the agent's sends may arrive in any order;
// an older state, or the same state without the report that came with a
// later send, does not replace what is served.
func TestServiceUpdatesOutOfOrder(t *testing.T) {
	h := newHarness(t)
	h.member("n1", upMeta(1, 1))
	report := &gwpb.Report{Job: "7", Stage: "before-signal", Outcome: "hung", Summary: "1 hung", TakenMs: ms(at(time.Minute))}
	withReport := &gwpb.StateUpdate{Meta: downMeta(1, 5, "job 7 hung"), Reports: []*gwpb.Report{report}}
	h.update("n1", withReport)
	h.update("n1", &gwpb.StateUpdate{Meta: downMeta(1, 5, "job 7 hung")}) // the same state, sent before the report
	h.update("n1", &gwpb.StateUpdate{Meta: teardownMeta(1, 4, at(time.Minute))})
	n := h.wantState("n1", view.StateDown)
	if n.Seq != 5 || n.LastReport == nil || n.LastReport.Job != "7" {
		t.Errorf("served seq %d, report %+v; want seq 5 with job 7's report", n.Seq, n.LastReport)
	}
}
