package aggregator

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/intake"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// Every state update is fresh and plausible: its send time within the
// clock skew allowance of this aggregator's clock (a captured update
// replayed later is refused, even when nothing newer is known to order it
// by), its agent start not in the future (a start in the year 2255 would
// shut the real agent out). Each refusal is counted and logged once per
// node and minute; the node's clock offset is measured.
func TestStateUpdatesFreshAndPlausible(t *testing.T) {
	logs := &testutil.SyncBuffer{}
	h := newHarness(t, provenOnly, func(o *Options) {
		o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	allowance := defaultPolicy.ClockSkewAllowance
	now := h.clk.Now()
	meta, send := freshHelpers(h, now)
	// Sent 700 ms ago by a node whose clock is right (the delivery took
	// that long): taken, and the offset measured.
	send(now.Add(-700*time.Millisecond), &gwpb.StateUpdate{Meta: meta(1, gwpb.State_STATE_UP), StartedMs: now.Add(-time.Hour).UnixMilli()})
	h.wantState("node1", view.StateUp)
	if off := h.svc.inputs["node1"].ClockOffset; off != 700*time.Millisecond {
		t.Errorf("clock offset %v, want 700ms", off)
	}
	// A down captured two minutes ago, replayed (the agent and this
	// aggregator may both have restarted since: nothing orders it).
	for range 3 {
		send(now.Add(-2*time.Minute), &gwpb.StateUpdate{Meta: meta(2, gwpb.State_STATE_DOWN), Reason: "replayed", StartedMs: now.Add(-time.Hour).UnixMilli()})
	}
	h.wantState("node1", view.StateUp)
	// From a clock implausibly far ahead (one a few minutes ahead is
	// heard and flagged: TestIncidentsClockAhead).
	send(now.Add(intake.MaxClockAhead+allowance), &gwpb.StateUpdate{Meta: meta(3, gwpb.State_STATE_DOWN), StartedMs: now.Add(-time.Hour).UnixMilli()})
	h.wantState("node1", view.StateUp)
	// An agent start in the year 2255.
	far := time.Date(2255, 1, 1, 0, 0, 0, 0, time.UTC)
	send(now, &gwpb.StateUpdate{Meta: meta(1, gwpb.State_STATE_DOWN), Reason: "future", StartedMs: far.UnixMilli()})
	h.wantState("node1", view.StateUp)
	// The real agent is still heard.
	send(now, &gwpb.StateUpdate{Meta: meta(4, gwpb.State_STATE_DOWN), Reason: "real", StartedMs: now.Add(-time.Hour).UnixMilli()})
	if n := h.wantState("node1", view.StateDown); n.Reason != "real" {
		t.Errorf("after the real update: %+v", n)
	}
	// A stale ack changes nothing either.
	h.mesh.Deliver("node1", &gwpb.Envelope{SentMs: now.Add(-time.Hour).UnixMilli(), Body: &gwpb.Envelope_Ack{Ack: &gwpb.ControlAck{Id: "x", Ok: true, Meta: meta(9, gwpb.State_STATE_UP)}}})
	h.sync()
	h.wantState("node1", view.StateDown)

	if n := strings.Count(logs.String(), "message refused: not fresh or not plausible"); n != 1 {
		t.Errorf("%d log lines for the refusals of one node within a minute, want 1:\n%s", n, logs)
	}
	if !strings.Contains(logs.String(), "a replay, or the node's clock is behind") {
		t.Errorf("the log does not say why:\n%s", logs)
	}
	if got := counted(t, h.svc, "intake_refused_total", "what", "stale"); got != 5 {
		t.Errorf("refused stale %v, want 5", got)
	}
	if got := counted(t, h.svc, "intake_refused_total", "what", "future_start"); got != 1 {
		t.Errorf("refused future_start %v, want 1", got)
	}
}

// A state update that a lossy network delayed (TCP retries a lost SYN only
// after 1 s, then 3 s; the send time is stamped before the dial) is no
// replay: taken, up to the clock allowance plus mesh.MaxDelivery, and the
// node is not flagged as skewed for it. Refusing it would leave the node's
// state unknown until its next change, since the agent counts a refused
// message delivered.
func TestStateUpdateDelayedInDeliveryIsTaken(t *testing.T) {
	h := newHarness(t, provenOnly)
	allowance := h.svc.clockAllowance()
	now := h.clk.Now()
	meta, send := freshHelpers(h, now)
	started := now.Add(-time.Hour).UnixMilli()
	delayed := allowance + mesh.MaxDelivery - 500*time.Millisecond
	send(now.Add(-delayed), &gwpb.StateUpdate{Meta: meta(1, gwpb.State_STATE_DOWN), Reason: "delayed", StartedMs: started})
	if n := h.wantState("node1", view.StateDown); n.Reason != "delayed" {
		t.Fatalf("an update delivered %v after its send time: %+v, want taken", delayed, n)
	}
	if got := counted(t, h.svc, "intake_refused_total", "what", "stale"); got != 0 {
		t.Errorf("refused stale %v, want 0", got)
	}
	if r := h.svc.Ready(); r.ClockSkewedNodes != 0 {
		t.Errorf("readiness %+v: a delayed delivery flagged as a clock behind", r)
	}
	// Past that bound it is refused.
	send(now.Add(-(allowance + mesh.MaxDelivery + time.Second)), &gwpb.StateUpdate{Meta: meta(2, gwpb.State_STATE_UP), StartedMs: started})
	h.wantState("node1", view.StateDown)
	if got := counted(t, h.svc, "intake_refused_total", "what", "stale"); got != 1 {
		t.Errorf("refused stale %v, want 1", got)
	}
}

// freshHelpers returns, for the fresh tests, node1's meta of seq in state
// st, and the delivery of an update with send time sent.
func freshHelpers(h *harness, now time.Time) (func(uint64, gwpb.State) *gwpb.Meta, func(time.Time, *gwpb.StateUpdate)) {
	meta := func(seq uint64, st gwpb.State) *gwpb.Meta {
		return &gwpb.Meta{Role: gwpb.Role_ROLE_AGENT, Incarnation: 1, Seq: seq, State: st, SinceMs: now.UnixMilli(), Reason: "x"}
	}
	send := func(sent time.Time, u *gwpb.StateUpdate) {
		h.mesh.Deliver("node1", &gwpb.Envelope{SentMs: sent.UnixMilli(), Body: &gwpb.Envelope_State{State: u}})
		h.sync()
	}
	return meta, send
}
