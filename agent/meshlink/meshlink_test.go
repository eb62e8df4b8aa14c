package meshlink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/execsys"
	"github.com/gracewatch/gracewatch/agent/request"
	"github.com/gracewatch/gracewatch/agent/teardown"
	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

func TestMetaOf(t *testing.T) {
	since := time.UnixMilli(1_800_000_000_000)
	d1, d2 := since.Add(time.Minute), since.Add(2*time.Minute)
	ended := since
	st := teardown.Status{Node: "n1", State: teardown.StateTeardown, Since: since, FreeAt: d2, Seq: 42, Incarnation: 3,
		Jobs: []teardown.Job{
			{ID: "a", Phase: teardown.PhaseTeardown, Deadline: d1, Ended: ended, Grace: time.Minute},
			{ID: "b", Phase: teardown.PhaseOverdue, Deadline: d2, Ended: ended, Grace: 2 * time.Minute},
			{ID: "c", Phase: teardown.PhaseRunning},
		}}
	m := MetaOf(st)
	if m.State != gwpb.State_STATE_TEARDOWN || m.FreeAtMs != d2.UnixMilli() || m.DeadlineMs != d2.UnixMilli() ||
		m.Seq != 42 || m.Incarnation != 3 || m.SinceMs != since.UnixMilli() || m.Role != gwpb.Role_ROLE_AGENT {
		t.Fatalf("meta %v", m)
	}
	b, err := mesh.EncodeMeta(m)
	if err != nil || len(b) > 64 {
		t.Fatalf("encoded teardown meta: %d bytes, %v (want within 64)", len(b), err)
	}
	tds := teardownsOf(st)
	if len(tds) != 2 || tds[0].Job != "a" || tds[0].GraceMs != 60000 || tds[1].DeadlineMs != d2.UnixMilli() {
		t.Fatalf("teardowns %v", tds)
	}
	down := MetaOf(teardown.Status{State: teardown.StateDown, Reason: "job b teardown exceeded grace 2m0s", Since: since})
	if down.State != gwpb.State_STATE_DOWN || down.FreeAtMs != 0 || down.Reason == "" {
		t.Fatalf("down meta %v", down)
	}
}

// A teardown whose E is in question is judged at the question's bound
// (Held) when that is later than D: the meta's deadline and the teardown's
// carry it, free_at stays D.
func TestMetaCarriesTheHeldDeadline(t *testing.T) {
	d := time.UnixMilli(1_800_000_000_000)
	held := d.Add(7 * time.Second)
	st := teardown.Status{Node: "n1", State: teardown.StateTeardown, FreeAt: d,
		Jobs: []teardown.Job{{ID: "5", Phase: teardown.PhaseTeardown, Deadline: d, Held: held, Ended: d.Add(-time.Second)}}}
	m := MetaOf(st)
	tds := teardownsOf(st)
	if m.GetDeadlineMs() != held.UnixMilli() || m.GetFreeAtMs() != d.UnixMilli() || len(tds) != 1 || tds[0].GetDeadlineMs() != held.UnixMilli() {
		t.Fatalf("meta deadline %d, free_at %d, teardowns %v: want deadline %d (held), free_at %d (D)",
			m.GetDeadlineMs(), m.GetFreeAtMs(), tds, held.UnixMilli(), d.UnixMilli())
	}
	st.Jobs[0].Held = d.Add(-time.Second) // a bound before D holds nothing
	if m := MetaOf(st); m.GetDeadlineMs() != d.UnixMilli() {
		t.Errorf("meta deadline %d with a bound before D, want D %d", m.GetDeadlineMs(), d.UnixMilli())
	}
	// A running job asked about at its E + G (free_at E + G): held too.
	st.Jobs[0] = teardown.Job{ID: "6", Phase: teardown.PhaseRunning, Deadline: d, Held: held}
	if m := MetaOf(st); m.GetDeadlineMs() != held.UnixMilli() || m.GetFreeAtMs() != d.UnixMilli() {
		t.Errorf("running job asked about: meta deadline %d, free_at %d; want %d (held), %d", m.GetDeadlineMs(), m.GetFreeAtMs(), held.UnixMilli(), d.UnixMilli())
	}
}

func TestGossipedMetaLeavesSinceOutWhileUp(t *testing.T) {
	since := time.UnixMilli(1_800_000_000_000)
	up := teardown.Status{Node: "n1", State: teardown.StateUp, Since: since, Seq: 42, Incarnation: 3}
	g := gossipedMeta(up, false)
	if g.SinceMs != 0 || g.Seq != 42 || g.Incarnation != 3 || g.State != gwpb.State_STATE_UP {
		t.Fatalf("gossiped up meta %v: want since_ms 0, seq and incarnation kept", g)
	}
	if d := MetaOf(up); d.SinceMs != since.UnixMilli() {
		t.Fatalf("direct meta %v lost since_ms", d)
	}
	gb, _ := mesh.EncodeMeta(g)
	db, _ := mesh.EncodeMeta(MetaOf(up))
	if len(gb) >= len(db) {
		t.Fatalf("gossiped up meta %d bytes, direct %d: want smaller", len(gb), len(db))
	}
	down := teardown.Status{Node: "n1", State: teardown.StateDown, Reason: "hung", Since: since, Seq: 43, Incarnation: 3}
	if g := gossipedMeta(down, true); g.SinceMs != since.UnixMilli() || g.Seq != 43 || g.Incarnation != 3 {
		t.Fatalf("gossiped down meta %v: since_ms, seq and incarnation must stay", g)
	}
	// A node that proves itself gossips what every up node has in common.
	if g := gossipedMeta(up, true); g.Seq != 0 || g.Incarnation != 0 || g.State != gwpb.State_STATE_UP {
		t.Fatalf("gossiped up meta of a proving node %v: want no seq nor incarnation", g)
	}
	other := up
	other.Node, other.Seq, other.Incarnation = "n2", 4711, 17
	a, _ := mesh.EncodeMeta(gossipedMeta(up, true))
	b, _ := mesh.EncodeMeta(gossipedMeta(other, true))
	if string(a) != string(b) {
		t.Errorf("two proving up nodes gossip different metas: %x, %x", a, b)
	}
}

// jobSup records the job calls of the mesh link's job registration.
type jobSup struct {
	Supervisor
	starts              []request.JobStartRequest
	updates             []request.JobUpdateRequest
	startErr, updateErr error
	status              teardown.Status
}

func (s *jobSup) StartJob(ctx context.Context, req request.JobStartRequest) (teardown.Job, error) {
	s.starts = append(s.starts, req)
	return teardown.Job{}, s.startErr
}

func (s *jobSup) Status(ctx context.Context) (teardown.Status, error) { return s.status, nil }

func (s *jobSup) UpdateJob(ctx context.Context, id string, req request.JobUpdateRequest) (teardown.Job, error) {
	s.updates = append(s.updates, req)
	return teardown.Job{}, s.updateErr
}

// The controller's registration of a job (through an aggregator) registers
// it, or, when the node's own prolog registered it first (with its cgroup,
// without E), moves its expiration in.
func TestRegisterJobFromTheMesh(t *testing.T) {
	reg := &gwpb.JobRegistration{Job: "41", Expiration: "1764750000", Grace: "90s"}
	sup := &jobSup{}
	l := &running{sup: sup}
	if err := l.registerJob(context.Background(), reg); err != nil || len(sup.starts) != 1 || len(sup.updates) != 0 {
		t.Fatalf("new job: %v, starts %+v updates %+v", err, sup.starts, sup.updates)
	}
	if want := (request.JobStartRequest{Job: "41", Expiration: "1764750000", Grace: "90s"}); sup.starts[0] != want {
		t.Fatalf("start %+v, want %+v", sup.starts[0], want)
	}
	sup = &jobSup{startErr: fmt.Errorf("job 41: %w", request.ErrDuplicateJob)}
	l.sup = sup
	if err := l.registerJob(context.Background(), reg); err != nil || len(sup.updates) != 1 || sup.updates[0].Expiration != "1764750000" || sup.updates[0].Cgroup != "" {
		t.Fatalf("registered by the prolog first: %v, updates %+v", err, sup.updates)
	}
	// Registered with an E already: the mesh may move it later, never
	// earlier (a shortened E would be a false DOWN).
	later := time.Unix(1764750000, 0)
	sup = &jobSup{startErr: fmt.Errorf("job 41: %w", request.ErrDuplicateJob),
		status: teardown.Status{Jobs: []teardown.Job{{ID: "41", Expiration: later}}}}
	l.sup = sup
	if err := l.registerJob(context.Background(), reg); err != nil || len(sup.updates) != 0 {
		t.Fatalf("same E again: %v, updates %+v; want success and no update", err, sup.updates)
	}
	earlier := later.Add(time.Hour)
	sup.status.Jobs[0].Expiration = earlier
	if err := l.registerJob(context.Background(), reg); !errors.Is(err, request.ErrConflict) || len(sup.updates) != 0 {
		t.Fatalf("an earlier E: %v, updates %+v; want a refusal", err, sup.updates)
	}
	before := later.Add(-time.Hour)
	sup.status.Jobs[0].Expiration = before
	if err := l.registerJob(context.Background(), reg); err != nil || len(sup.updates) != 1 {
		t.Fatalf("a later E: %v, updates %+v; want it moved", err, sup.updates)
	}
	sup = &jobSup{startErr: fmt.Errorf("job 41: %w", request.ErrDuplicateJob), updateErr: fmt.Errorf("job 41: %w: it is released", request.ErrConflict)}
	l.sup = sup
	if err := l.registerJob(context.Background(), reg); !errors.Is(err, request.ErrConflict) {
		t.Fatalf("released on the node: %v, want the refusal passed on", err)
	}
	if err := l.registerJob(context.Background(), nil); err == nil {
		t.Fatal("no job: want an error")
	}
}

// A Control is not carried out after its deadline (the aggregator has told
// its caller it timed out); one of an older aggregator has none.
func TestLateControl(t *testing.T) {
	asked := time.UnixMilli(1764750000000)
	c := &gwpb.Control{Id: "x", Action: gwpb.Action_ACTION_DRAIN, AskedMs: asked.UnixMilli(), DeadlineMs: asked.Add(10 * time.Second).UnixMilli()}
	if err := lateControl(c, asked.Add(10*time.Second)); err != nil {
		t.Errorf("at the deadline: %v", err)
	}
	err := lateControl(c, asked.Add(28*time.Second))
	if err == nil || !strings.Contains(err.Error(), "18s after its deadline") || !strings.Contains(err.Error(), "not applied") {
		t.Errorf("18 s late: %v", err)
	}
	if err := lateControl(&gwpb.Control{Id: "old"}, asked.Add(time.Hour)); err != nil {
		t.Errorf("no deadline: %v", err)
	}
}

// Controls that flood a full queue are dropped with one line per sender
// and 10 s, which reports how many it held back.
func TestControlDropsLogBounded(t *testing.T) {
	logs := &testutil.SyncBuffer{}
	l := New(slog.New(slog.NewTextHandler(logs, nil)), nil)
	now := time.Unix(1_764_750_000, 0)
	l.now = func() time.Time { return now }
	const sent = 1000
	for i := range sent {
		l.HandleMessage("agg-1", &gwpb.Envelope{Body: &gwpb.Envelope_Control{Control: &gwpb.Control{Id: fmt.Sprint(i), Action: gwpb.Action_ACTION_DRAIN}}})
	}
	if n := strings.Count(logs.String(), "control queue full"); n != 1 {
		t.Errorf("%d lines for %d controls past a full queue, want 1", n, sent-cap(l.ctrl))
	}
	now = now.Add(controlDropLogEvery)
	l.HandleMessage("agg-1", &gwpb.Envelope{Body: &gwpb.Envelope_Control{Control: &gwpb.Control{Id: "late", Action: gwpb.Action_ACTION_DRAIN}}})
	if want := fmt.Sprintf("suppressed=%d", sent-cap(l.ctrl)-1); !strings.Contains(logs.String(), want) {
		t.Errorf("the next line does not report %s:\n%s", want, logs.String())
	}
}

// A newly seen aggregator gets the state at once; the same aggregator's
// meta changing again (it signs it every few minutes) does not send it
// again, nor does an agent's change.
func TestKickOnNewAggregatorOnly(t *testing.T) {
	l := New(slog.New(slog.DiscardHandler), nil)
	agg := mesh.Member{Name: "agg-1", Role: gwpb.Role_ROLE_AGGREGATOR, Status: mesh.StatusAlive}
	kicked := func() bool {
		select {
		case <-l.wake:
			<-l.wakeMeta
			return true
		default:
			return false
		}
	}
	l.MemberChanged(agg)
	if !kicked() {
		t.Fatal("a new aggregator: no send")
	}
	l.MemberChanged(agg) // re-signed meta
	if kicked() {
		t.Error("the same aggregator's meta again: sent again")
	}
	l.MemberChanged(mesh.Member{Name: "n2", Role: gwpb.Role_ROLE_AGENT, Status: mesh.StatusAlive})
	if kicked() {
		t.Error("an agent's change: sent")
	}
	agg.Status = mesh.StatusDead
	l.MemberChanged(agg)
	agg.Status = mesh.StatusAlive
	l.MemberChanged(agg)
	if !kicked() {
		t.Error("an aggregator back from the dead: no send")
	}
}

// An aggregator whose proven meta names a new start (a new process under
// the same name: restarted after a crash, which memberlist may never have
// seen die) gets the full state again at once; the same process signing
// its meta again does not, nor does an unproven start; and a start that
// keeps changing makes at most one resend per restartResendEvery.
func TestResendOnAggregatorRestart(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	fs := newFakeSends(clk)
	ctx, cancel := context.WithCancel(context.Background())
	l := New(slog.New(slog.DiscardHandler), nil)
	l.now = clk.Now
	l.sender = newStateSender(ctx, fs.send, clk, slog.New(slog.DiscardHandler))
	l.sender.writes = 1 // what counts here is whether a send starts; the confirming write has its own tests
	// Cancel first: a send still waiting for its answer (a failed check
	// below) ends with the context, so that close does not wait for it.
	defer l.sender.close()
	defer cancel()
	l.sender.publish(&gwpb.StateUpdate{Meta: &gwpb.Meta{Seq: 1}}, []string{"agg-1"})
	fs.call(t, 0).answer <- nil
	testutil.Eventually(t, 10*time.Second, "the first state delivered", func() bool { return l.sender.deliveredAll() == 1 })
	// What counts is whether an attempt started (resend's, synchronous);
	// the test zeroes the count after each.
	attempts := func() int {
		l.sender.mu.Lock()
		defer l.sender.mu.Unlock()
		return l.sender.targets["agg-1"].attempts
	}
	agg := func(started int64, proven bool) mesh.Member {
		return mesh.Member{Name: "agg-1", Role: gwpb.Role_ROLE_AGGREGATOR, Status: mesh.StatusAlive, Proven: proven,
			Meta: &gwpb.Meta{Role: gwpb.Role_ROLE_AGGREGATOR, StartedMs: started}}
	}
	l.sender.mu.Lock()
	l.sender.targets["agg-1"].attempts = 0
	l.sender.mu.Unlock()
	// resent makes the change and checks whether it resent. The count of
	// sends is read before the change: the resend's send starts on a
	// goroutine of its own, and may be counted before this looks.
	resent := func(what string, want bool, change mesh.Member) {
		t.Helper()
		before := fs.numCalls()
		l.MemberChanged(change)
		got := attempts() > 0
		if got != want {
			t.Fatalf("%s: resent %v, want %v", what, got, want)
		}
		if got {
			fs.call(t, before).answer <- nil
			testutil.Eventually(t, 10*time.Second, "the resend delivered", func() bool { return l.sender.deliveredAll() == 1 })
			l.sender.mu.Lock()
			l.sender.targets["agg-1"].attempts = 0
			l.sender.mu.Unlock()
		}
	}

	l.MemberChanged(agg(1000, true)) // first sight: the kick's publish covers it
	<-l.wake
	if attempts() > 0 {
		t.Fatal("first sight: resent, want the kick's publish only")
	}
	resent("the same process signed again", false, agg(1000, true))
	resent("an unproven new start", false, agg(2000, false))
	resent("a new process", true, agg(2000, true))
	resent("another new process within restartResendEvery", false, agg(3000, true))
	clk.Advance(restartResendEvery)
	resent("the held-back start after restartResendEvery", true, agg(3000, true))
	resent("the same start again", false, agg(3000, true))
}

// TestKillPathInStateUpdate: the node's kill-path floor (execsys.KillPathOf)
// goes to the aggregators in the StateUpdate once checked; an exec system
// that never answers ends with the check's context and leaves the floor 0.
func TestKillPathInStateUpdate(t *testing.T) {
	slurm := execsys.Check{System: "slurm", Path: "OverTimeLimit 0s + ...\n" + strings.Repeat("x", 300), MinGrace: 65 * time.Second}
	flux := execsys.Check{System: "flux", Path: "kill-timeout 5s", MinGrace: 10 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sent := make(chan *gwpb.StateUpdate, 16)
	l := &running{Link: New(slog.New(slog.DiscardHandler), nil), m: fakeMesh{aggregators: []string{"agg1"}}}
	l.sender = newStateSender(ctx, func(_ context.Context, _ string, u *gwpb.StateUpdate) error { sent <- u; return nil },
		clock.NewFake(time.Unix(1_800_000_000, 0)), slog.New(slog.DiscardHandler))
	defer l.sender.close()
	l.OnChange(teardown.Status{Node: "n1", State: teardown.StateUp})
	l.execCheck = func(context.Context) ([]execsys.Check, []error) { return []execsys.Check{flux, slurm}, nil }
	l.checkKillPath(ctx)
	l.publish()
	u := <-sent
	if u.GetKillPathFloorMs() != 65000 || !strings.HasPrefix(u.GetKillPath(), "slurm: ") {
		t.Fatalf("StateUpdate kill path %d %q", u.GetKillPathFloorMs(), u.GetKillPath())
	}

	hung := New(slog.New(slog.DiscardHandler), nil)
	hung.execCheck = func(ctx context.Context) ([]execsys.Check, []error) { <-ctx.Done(); return nil, []error{ctx.Err()} }
	cctx, ccancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { hung.checkKillPath(cctx); close(done) }()
	ccancel()
	<-done
	if hung.killPathFloor != 0 {
		t.Fatalf("floor %v from a check that never answered", hung.killPathFloor)
	}
}
