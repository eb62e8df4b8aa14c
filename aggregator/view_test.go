package aggregator

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/intake"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func ms(t time.Time) int64 { return t.UnixMilli() }

// at returns t0 + d.
func at(d time.Duration) time.Time { return t0.Add(d) }

func metaOf(state gwpb.State, inc, seq uint64, since time.Time) *gwpb.Meta {
	return &gwpb.Meta{Schema: 1, Role: gwpb.Role_ROLE_AGENT, Incarnation: inc, Seq: seq, State: state, SinceMs: ms(since)}
}

func upMeta(inc, seq uint64) *gwpb.Meta { return metaOf(gwpb.State_STATE_UP, inc, seq, t0) }

func teardownMeta(inc, seq uint64, deadline time.Time) *gwpb.Meta {
	m := metaOf(gwpb.State_STATE_TEARDOWN, inc, seq, t0)
	m.DeadlineMs, m.FreeAtMs = ms(deadline), ms(deadline)
	m.Reason = "job 7 tearing down"
	return m
}

func downMeta(inc, seq uint64, reason string) *gwpb.Meta {
	m := metaOf(gwpb.State_STATE_DOWN, inc, seq, at(time.Minute))
	m.Reason = reason
	return m
}

func alive(name string, gossip *gwpb.Meta) view.NodeInput {
	return view.NodeInput{Name: name, Role: view.RoleAgent, Status: mesh.StatusAlive, StatusSince: t0, Gossip: intake.DecodeMeta(gossip)}
}

// updateIn is u as the intake keeps it (bounded, then decoded); nil for
// nil.
func updateIn(u *gwpb.StateUpdate) *view.NodeUpdate {
	return intake.DecodeUpdate(intake.BoundUpdate(u))
}

func tp(t time.Time) *time.Time { return &t }

// val is *p, or the zero time for nil.
func val(p *time.Time) time.Time {
	if p == nil {
		return time.Time{}
	}
	return *p
}

var defaultPolicy = view.Policy{ClockSkewAllowance: 5 * time.Second}

func TestCompute(t *testing.T) {
	deadline := at(2 * time.Minute)
	downReport := &gwpb.StateUpdate{
		Meta:   downMeta(1, 5, "job 7 teardown exceeded grace 120s: 1 unkil…"),
		Reason: "job 7 teardown exceeded grace 120s: 1 unkillable (pid 5814 cat, D in request_wait_answer, fuse /scratch)",
		Teardowns: []*gwpb.Teardown{{
			Job: "7", Phase: "overdue", EndedMs: ms(t0), DeadlineMs: ms(deadline), ExpirationMs: ms(t0), GraceMs: 120000,
		}},
		Reports: []*gwpb.Report{
			{Job: "6", Stage: "before-signal", Outcome: "hung", Summary: "older", TakenMs: ms(at(-time.Hour)), DetailJson: []byte(`{"v":1}`)},
			{Job: "7", Stage: "after-escalation", Outcome: "hung", Summary: "1 unkillable", TakenMs: ms(deadline), DetailJson: []byte(`{"job":"7"}`)},
		},
	}
	twoTeardowns := &gwpb.StateUpdate{
		Meta: teardownMeta(1, 3, at(5*time.Minute)),
		Teardowns: []*gwpb.Teardown{
			{Job: "1", Phase: "teardown", DeadlineMs: ms(at(5 * time.Minute))},
			{Job: "2", Phase: "teardown", DeadlineMs: ms(at(2 * time.Minute))},
			{Job: "3", Phase: "released", DeadlineMs: ms(at(time.Minute)), Outcome: "clean"},
		},
	}
	unknownState := upMeta(1, 1)
	unknownState.State = gwpb.State(7)
	decodeErr := errors.New("proto: cannot parse invalid wire-format data")

	tests := []struct {
		name   string
		in     view.NodeInput
		now    time.Time
		policy view.Policy
		// want: state, reason, since, free_at and schedulable exactly.
		state       view.State
		reason      string
		since       *time.Time
		freeAt      *time.Time
		schedulable bool
		check       func(t *testing.T, n view.Node)
	}{
		{
			name: "up", in: alive("n1", upMeta(1, 1)), now: t0,
			state: view.StateUp, since: tp(t0), schedulable: true,
		},
		{
			name: "suspect member is served from its meta", now: t0,
			in:    func() view.NodeInput { in := alive("n1", upMeta(1, 1)); in.Status = mesh.StatusSuspect; return in }(),
			state: view.StateUp, since: tp(t0), schedulable: true,
			check: func(t *testing.T, n view.Node) {
				if mesh.Status(n.Member) != mesh.StatusSuspect {
					t.Errorf("member = %q, want suspect", n.Member)
				}
			},
		},
		{
			name: "teardown within grace: schedulable from free_at", now: at(time.Minute),
			in:    alive("n1", teardownMeta(1, 2, deadline)),
			state: view.StateTeardown, reason: "job 7 tearing down", since: tp(t0), freeAt: tp(deadline), schedulable: true,
		},
		{
			name: "teardown without free_at falls back to the deadline", now: at(time.Minute),
			in: func() view.NodeInput {
				m := teardownMeta(1, 2, deadline)
				m.FreeAtMs = 0
				return alive("n1", m)
			}(),
			state: view.StateTeardown, reason: "job 7 tearing down", since: tp(t0), freeAt: tp(deadline), schedulable: true,
		},
		{
			name: "teardown past D but within the allowance", now: deadline.Add(4999 * time.Millisecond),
			in:    alive("n1", teardownMeta(1, 2, deadline)),
			state: view.StateTeardown, reason: "job 7 tearing down", since: tp(t0), freeAt: tp(deadline), schedulable: true,
		},
		{
			name: "central enforcement: no report by D + allowance", now: deadline.Add(5 * time.Second),
			in:    alive("n1", teardownMeta(1, 2, deadline)),
			state: view.StateDown, reason: "no report after teardown deadline 2025-06-01T12:02:00.000Z",
			since: tp(deadline.Add(5 * time.Second)),
		},
		{
			name: "central enforcement uses the earliest deadline in progress", now: at(2*time.Minute + 5*time.Second),
			in: func() view.NodeInput {
				in := alive("n1", twoTeardowns.Meta)
				in.Update = updateIn(twoTeardowns)
				in.Direct = in.Update.Meta
				return in
			}(),
			state: view.StateDown, reason: "no report after teardown deadline 2025-06-01T12:02:00.000Z",
			since: tp(at(2*time.Minute + 5*time.Second)),
			check: func(t *testing.T, n view.Node) {
				if len(n.Teardowns) != 3 {
					t.Errorf("teardowns = %d, want 3", len(n.Teardowns))
				}
			},
		},
		{
			name: "a newer report after the deadline wins", now: deadline.Add(time.Hour),
			in: func() view.NodeInput {
				in := alive("n1", teardownMeta(1, 2, deadline))
				in.Direct = intake.DecodeMeta(upMeta(1, 3))
				return in
			}(),
			state: view.StateUp, since: tp(t0), schedulable: true,
		},
		{
			name: "agent down: the untruncated reason of the current update", now: at(time.Hour),
			in: func() view.NodeInput {
				in := alive("n1", downReport.Meta)
				in.Update = updateIn(downReport)
				in.Direct = in.Update.Meta
				return in
			}(),
			state: view.StateDown, reason: downReport.Reason, since: tp(at(time.Minute)),
			check: func(t *testing.T, n view.Node) {
				if n.LastReport == nil || n.LastReport.Job != "7" || string(n.LastReport.Detail) != `{"job":"7"}` {
					t.Errorf("last report = %+v, want job 7's with detail", n.LastReport)
				}
				if len(n.Teardowns) != 1 || n.Teardowns[0].Grace != 2*time.Minute || n.Teardowns[0].Phase != "overdue" {
					t.Errorf("teardowns = %+v", n.Teardowns)
				}
				if n.Incarnation != 1 || n.Seq != 5 {
					t.Errorf("(incarnation, seq) = (%d, %d), want (1, 5)", n.Incarnation, n.Seq)
				}
			},
		},
		{
			name: "gossip newer than the update: its reason, no stale details", now: at(time.Hour),
			in: func() view.NodeInput {
				in := alive("n1", downMeta(1, 6, "drained by admin"))
				in.Update = updateIn(downReport)
				in.Direct = in.Update.Meta
				return in
			}(),
			state: view.StateDown, reason: "drained by admin", since: tp(at(time.Minute)),
			check: func(t *testing.T, n view.Node) {
				if n.LastReport != nil || len(n.Teardowns) != 0 {
					t.Errorf("stale details served: %+v %+v", n.LastReport, n.Teardowns)
				}
			},
		},
		{
			name: "a direct meta newer than gossip wins", now: at(time.Hour),
			in: func() view.NodeInput {
				in := alive("n1", downMeta(1, 5, "hung"))
				in.Direct = intake.DecodeMeta(upMeta(1, 6))
				return in
			}(),
			state: view.StateUp, since: tp(t0), schedulable: true,
		},
		{
			name: "a new incarnation is newer whatever its seq", now: t0,
			in: func() view.NodeInput {
				in := alive("n1", upMeta(2, 1))
				in.Direct = intake.DecodeMeta(downMeta(1, 99, "old"))
				return in
			}(),
			state: view.StateUp, since: tp(t0), schedulable: true,
		},
		{
			name: "dead member: unreachable since it died", now: at(time.Hour),
			in: func() view.NodeInput {
				in := alive("n1", upMeta(1, 1))
				in.Status, in.StatusSince = mesh.StatusDead, at(10*time.Minute)
				return in
			}(),
			state: view.StateUnreachable, reason: "the mesh declared the agent dead", since: tp(at(10 * time.Minute)),
		},
		{
			name: "dead member keeps its last reported state in the reason", now: at(time.Hour),
			in: func() view.NodeInput {
				in := alive("n1", downMeta(1, 5, "hung"))
				in.Status, in.StatusSince = mesh.StatusDead, at(10*time.Minute)
				return in
			}(),
			state: view.StateUnreachable, reason: "the mesh declared the agent dead; last reported down: hung", since: tp(at(10 * time.Minute)),
		},
		{
			name: "left member", now: at(time.Hour),
			in: func() view.NodeInput {
				in := alive("n1", upMeta(1, 1))
				in.Status, in.StatusSince = mesh.StatusLeft, at(10*time.Minute)
				return in
			}(),
			state: view.StateUnreachable, reason: "the agent left the mesh", since: tp(at(10 * time.Minute)),
		},
		{
			name: "unreachable_is_down", now: at(time.Hour), policy: view.Policy{ClockSkewAllowance: 5 * time.Second, UnreachableIsDown: true},
			in: func() view.NodeInput {
				in := alive("n1", upMeta(1, 1))
				in.Status, in.StatusSince = mesh.StatusDead, at(10*time.Minute)
				return in
			}(),
			state: view.StateDown, reason: "unreachable since 2025-06-01T12:10:00.000Z: the mesh declared the agent dead",
			since: tp(at(10 * time.Minute)),
		},
		{
			name: "dead during a teardown, before D + allowance: unreachable", now: deadline,
			in: func() view.NodeInput {
				in := alive("n1", teardownMeta(1, 2, deadline))
				in.Status, in.StatusSince = mesh.StatusDead, at(time.Minute)
				return in
			}(),
			state: view.StateUnreachable, reason: "the mesh declared the agent dead; last reported teardown: job 7 tearing down",
			since: tp(at(time.Minute)),
		},
		{
			name: "dead during a teardown: still down on time", now: deadline.Add(time.Minute),
			in: func() view.NodeInput {
				in := alive("n1", teardownMeta(1, 2, deadline))
				in.Status, in.StatusSince = mesh.StatusDead, at(time.Minute)
				return in
			}(),
			state:  view.StateDown,
			reason: "no report after teardown deadline 2025-06-01T12:02:00.000Z (the mesh declared the agent dead)",
			since:  tp(deadline.Add(5 * time.Second)),
		},
		{
			name: "meta does not decode: unreachable, not down", now: at(time.Hour),
			in:    view.NodeInput{Name: "n1", Status: mesh.StatusAlive, StatusSince: t0, GossipErr: decodeErr},
			state: view.StateUnreachable, reason: "meta does not decode: " + decodeErr.Error(), since: tp(t0),
			check: func(t *testing.T, n view.Node) {
				if n.DecodeError != decodeErr.Error() || n.Role != "unspecified" {
					t.Errorf("decode_error = %q, role = %q", n.DecodeError, n.Role)
				}
			},
		},
		{
			name: "meta does not decode, unreachable_is_down: down", now: at(time.Hour),
			policy: view.Policy{UnreachableIsDown: true},
			in:     view.NodeInput{Name: "n1", Status: mesh.StatusAlive, StatusSince: t0, GossipErr: decodeErr},
			state:  view.StateDown, reason: "meta does not decode: " + decodeErr.Error(), since: tp(t0),
		},
		{
			name: "meta does not decode but a direct update does", now: at(time.Hour),
			in: func() view.NodeInput {
				in := view.NodeInput{Name: "n1", Status: mesh.StatusAlive, GossipErr: decodeErr}
				in.Update = updateIn(&gwpb.StateUpdate{Meta: upMeta(1, 4)})
				return in
			}(),
			state: view.StateUp, since: tp(t0), schedulable: true,
			check: func(t *testing.T, n view.Node) {
				if n.DecodeError == "" {
					t.Error("decode_error not reported")
				}
			},
		},
		{
			name: "a state this build does not know", now: t0,
			in:    alive("n1", unknownState),
			state: view.StateUnreachable, reason: "the agent reports an unknown state (7)", since: tp(t0),
		},
		{
			name: "no meta at all", now: t0,
			in:    alive("n1", nil),
			state: view.StateUnreachable, reason: "the agent has published no state", since: tp(t0),
		},
		{
			name: "a direct message before the member event counts as alive", now: t0,
			in:    view.NodeInput{Name: "n1", Role: view.RoleAgent, Direct: intake.DecodeMeta(upMeta(1, 1))},
			state: view.StateUp, since: tp(t0), schedulable: true,
			check: func(t *testing.T, n view.Node) {
				if mesh.Status(n.Member) != mesh.StatusAlive {
					t.Errorf("member = %q, want alive", n.Member)
				}
			},
		},
		{
			name: "times beyond year 9999 are served as null", now: t0,
			in: func() view.NodeInput {
				m := teardownMeta(1, 1, t0)
				m.FreeAtMs, m.DeadlineMs, m.SinceMs = 1<<62, 1<<62, -5
				return alive("n1", m)
			}(),
			state: view.StateTeardown, reason: "job 7 tearing down", schedulable: true,
			check: func(t *testing.T, n view.Node) {
				if _, err := json.Marshal(n); err != nil {
					t.Fatal(err)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.policy
			if p == (view.Policy{}) {
				p = defaultPolicy
			}
			got := view.Compute([]view.NodeInput{tt.in}, tt.now, p)
			if len(got) != 1 {
				t.Fatalf("got %d nodes, want 1", len(got))
			}
			n := got[0]
			if n.State != tt.state || n.Reason != tt.reason || n.Schedulable != tt.schedulable {
				t.Errorf("got (%s, %q, schedulable %v), want (%s, %q, %v)", n.State, n.Reason, n.Schedulable, tt.state, tt.reason, tt.schedulable)
			}
			if !sameTime(n.Since, val(tt.since)) {
				t.Errorf("since = %v, want %v", fmtPtr(n.Since), fmtPtr(val(tt.since)))
			}
			if !sameTime(n.FreeAt, val(tt.freeAt)) {
				t.Errorf("free_at = %v, want %v", fmtPtr(n.FreeAt), fmtPtr(val(tt.freeAt)))
			}
			if !n.FreeAt.IsZero() && n.State != view.StateTeardown {
				t.Errorf("free_at set in state %s", n.State)
			}
			if tt.check != nil {
				tt.check(t, n)
			}
			// Compute is pure: the same call gives the same JSON.
			again := view.Compute([]view.NodeInput{tt.in}, tt.now, p)
			if a, b := mustJSON(t, got), mustJSON(t, again); a != b {
				t.Errorf("not deterministic:\n%s\n%s", a, b)
			}
		})
	}
}

func TestComputeSortsAndOnlyReadsInputs(t *testing.T) {
	in := []view.NodeInput{alive("node10", upMeta(1, 1)), alive("login1", upMeta(1, 1)), alive("node9", upMeta(1, 1))}
	before := mustJSON(t, in)
	got := view.Compute(in, t0, defaultPolicy)
	var names []string
	for _, n := range got {
		names = append(names, n.Name)
	}
	if strings.Join(names, ",") != "login1,node10,node9" {
		t.Errorf("order = %v", names)
	}
	if mustJSON(t, in) != before {
		t.Error("Compute modified its inputs")
	}
}

func TestNextEnforcement(t *testing.T) {
	deadline := at(2 * time.Minute)
	in := alive("n1", teardownMeta(1, 2, deadline))
	got, ok := view.NextEnforcement(&in, t0, defaultPolicy)
	if !ok || !got.Equal(deadline.Add(5*time.Second)) {
		t.Errorf("nextEnforcement = %v, %v; want D + 5s", got, ok)
	}
	if _, ok := view.NextEnforcement(&in, deadline.Add(5*time.Second), defaultPolicy); ok {
		t.Error("a passed deadline is still pending")
	}
	up := alive("n2", upMeta(1, 1))
	if _, ok := view.NextEnforcement(&up, t0, defaultPolicy); ok {
		t.Error("an up node has a deadline")
	}
}

// servedCase is one node's input to view.Compute and how it must be
// served: state, reason and since exactly (a zero since: none), and the
// member status when member is set.
type servedCase struct {
	name   string
	in     view.NodeInput
	now    time.Time
	policy view.Policy
	state  view.State
	member mesh.Status
	reason string
	since  time.Time
}

// checkServed runs each case as a subtest.
func checkServed(t *testing.T, cases []servedCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			n := view.Compute([]view.NodeInput{tt.in}, tt.now, tt.policy)[0]
			if n.State != tt.state || n.Reason != tt.reason || tt.member != "" && mesh.Status(n.Member) != tt.member {
				t.Errorf("got (%s, member %s, %q), want (%s, member %s, %q)", n.State, n.Member, n.Reason, tt.state, tt.member, tt.reason)
			}
			if !sameTime(n.Since, tt.since) {
				t.Errorf("since = %v, want %v", fmtPtr(n.Since), fmtPtr(tt.since))
			}
		})
	}
}

func TestComputeUnreachableAfter(t *testing.T) {
	p := view.Policy{ClockSkewAllowance: 5 * time.Second, UnreachableAfter: 2 * time.Second}
	went := at(10 * time.Minute)
	gone := func(meta *gwpb.Meta, st mesh.Status) view.NodeInput {
		in := alive("n1", meta)
		in.Status, in.StatusSince = st, went
		return in
	}
	deadline := went.Add(time.Second)
	checkServed(t, []servedCase{
		{name: "dead within the window: served as before", in: gone(upMeta(1, 1), mesh.StatusDead),
			now: went.Add(2*time.Second - time.Millisecond), policy: p, state: view.StateUp, member: mesh.StatusAlive, since: t0},
		{name: "left within the window: served as before", in: gone(downMeta(1, 2, "hung"), mesh.StatusLeft),
			now: went, policy: p, state: view.StateDown, member: mesh.StatusAlive, reason: "hung", since: at(time.Minute)},
		{name: "dead for the window: unreachable since it went", in: gone(upMeta(1, 1), mesh.StatusDead),
			now: went.Add(2 * time.Second), policy: p, state: view.StateUnreachable, member: mesh.StatusDead,
			reason: "the mesh declared the agent dead", since: went},
		{name: "left for the window, unreachable_is_down", in: gone(upMeta(1, 1), mesh.StatusLeft),
			now: went.Add(time.Hour), policy: view.Policy{UnreachableAfter: 2 * time.Second, UnreachableIsDown: true},
			state: view.StateDown, member: mesh.StatusLeft,
			reason: "unreachable since 2025-06-01T12:10:00.000Z: the agent left the mesh", since: went},
		{name: "window 0: unreachable at once", in: gone(upMeta(1, 1), mesh.StatusDead),
			now: went, policy: view.Policy{}, state: view.StateUnreachable, member: mesh.StatusDead,
			reason: "the mesh declared the agent dead", since: went},
		{name: "unknown since: unreachable at once", in: func() view.NodeInput {
			in := gone(upMeta(1, 1), mesh.StatusDead)
			in.StatusSince = time.Time{}
			return in
		}(), now: went, policy: p, state: view.StateUnreachable, member: mesh.StatusDead, reason: "the mesh declared the agent dead"},
		{name: "the central deadline still holds within the window", in: gone(teardownMeta(1, 3, deadline), mesh.StatusDead),
			now: deadline.Add(5 * time.Second), policy: view.Policy{ClockSkewAllowance: 5 * time.Second, UnreachableAfter: time.Hour},
			state: view.StateDown, member: mesh.StatusAlive,
			reason: "no report after teardown deadline 2025-06-01T12:10:01.000Z", since: deadline.Add(5 * time.Second)},
	})
}

func TestNextEnforcementUnreachableAfter(t *testing.T) {
	p := view.Policy{ClockSkewAllowance: 5 * time.Second, UnreachableAfter: 2 * time.Second}
	went := at(time.Minute)
	in := alive("n1", upMeta(1, 1))
	in.Status, in.StatusSince = mesh.StatusDead, went
	if got, ok := view.NextEnforcement(&in, went, p); !ok || !got.Equal(went.Add(2*time.Second)) {
		t.Errorf("nextEnforcement = %v, %v; want the end of the window", got, ok)
	}
	if _, ok := view.NextEnforcement(&in, went.Add(2*time.Second), p); ok {
		t.Error("the window is still pending once it has passed")
	}
	// The earlier of a teardown's D + allowance and the window's end.
	in.Gossip = intake.DecodeMeta(teardownMeta(1, 2, went.Add(-4*time.Second)))
	if got, ok := view.NextEnforcement(&in, went, p); !ok || !got.Equal(went.Add(time.Second)) {
		t.Errorf("nextEnforcement = %v, %v; want D + allowance", got, ok)
	}
	if _, ok := view.NextEnforcement(&in, went, view.Policy{ClockSkewAllowance: -time.Hour}); ok {
		t.Error("window 0 and a passed deadline: still pending")
	}
}

func TestNodeSummaryDropsDetailOnly(t *testing.T) {
	n := view.Node{Name: "n", LastReport: &view.Report{Job: "1", Detail: json.RawMessage(`{}`)}}
	s := n.Summary()
	if s.LastReport.Detail != nil || s.LastReport.Job != "1" {
		t.Errorf("summary = %+v", s.LastReport)
	}
	if n.LastReport.Detail == nil {
		t.Error("Summary modified the node")
	}
}

func sameTime(a, b time.Time) bool { return a.Equal(b) }

func fmtPtr(t time.Time) string {
	if t.IsZero() {
		return "null"
	}
	return view.FormatTime(t)
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A node this aggregator has only just come to know, and only from gossip,
// is not served down by the central deadline before Settle has passed: a
// restarted aggregator can be handed a meta older than the agent's state
// (in teardown long after the agent was resumed), and the agent's own
// state is on its way.
func TestComputeSettle(t *testing.T) {
	p := view.Policy{ClockSkewAllowance: 5 * time.Second, Settle: 3 * time.Second}
	deadline := at(time.Minute)
	seen := at(10 * time.Minute) // long after D + allowance
	gossipOnly := func() view.NodeInput {
		in := alive("n1", teardownMeta(1, 3, deadline))
		in.FirstSeen = seen
		return in
	}
	centralReason := "no report after teardown deadline 2025-06-01T12:01:00.000Z"
	checkServed(t, []servedCase{
		{name: "gossip only, within settle: the gossiped state", in: gossipOnly(),
			now: seen.Add(3*time.Second - time.Millisecond), policy: p, state: view.StateTeardown, reason: "job 7 tearing down", since: t0},
		{name: "gossip only, settle over: down since the end of settle", in: gossipOnly(),
			now: seen.Add(3 * time.Second), policy: p, state: view.StateDown, reason: centralReason, since: seen.Add(3 * time.Second)},
		{name: "the agent sent its state: no hold", in: func() view.NodeInput {
			in := gossipOnly()
			in.Update = updateIn(&gwpb.StateUpdate{Meta: teardownMeta(1, 3, deadline)})
			in.Direct = in.Update.Meta
			return in
		}(), now: seen, policy: p, state: view.StateDown, reason: centralReason, since: deadline.Add(5 * time.Second)},
		{name: "a ControlAck's meta counts as the agent's own", in: func() view.NodeInput {
			in := gossipOnly()
			in.Direct = intake.DecodeMeta(teardownMeta(1, 3, deadline))
			return in
		}(), now: seen, policy: p, state: view.StateDown, reason: centralReason, since: deadline.Add(5 * time.Second)},
		{name: "settle 0: gossip is trusted at once", in: gossipOnly(),
			now: seen, policy: view.Policy{ClockSkewAllowance: 5 * time.Second}, state: view.StateDown, reason: centralReason,
			since: deadline.Add(5 * time.Second)},
		{name: "first seen unknown (a handover): no hold", in: func() view.NodeInput {
			in := gossipOnly()
			in.FirstSeen = time.Time{}
			return in
		}(), now: seen, policy: p, state: view.StateDown, reason: centralReason, since: deadline.Add(5 * time.Second)},
		{name: "a deadline later than settle: D + allowance as ever", in: func() view.NodeInput {
			in := alive("n1", teardownMeta(1, 3, seen.Add(time.Second)))
			in.FirstSeen = seen
			return in
		}(), now: seen.Add(6 * time.Second), policy: p, state: view.StateDown,
			reason: "no report after teardown deadline 2025-06-01T12:10:01.000Z", since: seen.Add(6 * time.Second)},
	})

	// The timer wakes at the end of settle, not at the passed D + allowance.
	in := gossipOnly()
	if got, ok := view.NextEnforcement(&in, seen, p); !ok || !got.Equal(seen.Add(3*time.Second)) {
		t.Errorf("nextEnforcement = %v, %v; want the end of settle", got, ok)
	}
	if _, ok := view.NextEnforcement(&in, seen.Add(3*time.Second), p); ok {
		t.Error("still pending once settle has passed")
	}
}
