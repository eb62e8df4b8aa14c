package meshlink

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/execsys"
	"github.com/gracewatch/gracewatch/agent/teardown"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// drainSup is a Supervisor that drains: its status is up until a drain.
type drainSup struct {
	Supervisor
	drains chan string // the reasons, with their by
	st     teardown.Status
}

func (s *drainSup) Status(context.Context) (teardown.Status, error) { return s.st, nil }

func (s *drainSup) Drain(_ context.Context, reason, by string) (teardown.Status, error) {
	s.drains <- reason + " by " + by
	st := s.st
	st.State, st.Reason, st.AdminDrain = teardown.StateDown, reason, true
	return st, nil
}

// TestRunWithSupervisorAndMesh: a Link built alone, before the supervisor
// and the mesh, runs with the two given to Run: the node's state goes to
// the aggregator, and an aggregator's drain reaches the supervisor and is
// acknowledged to that aggregator with the new state.
func TestRunWithSupervisorAndMesh(t *testing.T) {
	l := New(slog.New(slog.DiscardHandler), nil)
	l.execCheck = func(context.Context) ([]execsys.Check, []error) { return nil, nil }
	sup := &drainSup{drains: make(chan string, 1), st: teardown.Status{Node: "n1", State: teardown.StateUp, Seq: 1}}
	m := fakeMesh{aggregators: []string{"agg-1"}, sent: make(chan meshSend, 64)}
	l.OnChange(sup.st)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx, sup, m); close(done) }()
	defer func() { cancel(); <-done }()

	next := func(what string, ok func(meshSend) bool) {
		t.Helper()
		deadline := time.After(60 * time.Second)
		for {
			select {
			case s := <-m.sent:
				if ok(s) {
					return
				}
			case <-deadline:
				t.Fatalf("%s: not sent within 60 s", what)
			}
		}
	}
	next("the state to agg-1", func(s meshSend) bool {
		return s.to == "agg-1" && s.env.GetState().GetMeta().GetSeq() == 1
	})
	l.HandleMessage("agg-1", &gwpb.Envelope{Body: &gwpb.Envelope_Control{Control: &gwpb.Control{
		Id: "c1", Action: gwpb.Action_ACTION_DRAIN, Reason: "maintenance", By: "alice"}}})
	select {
	case got := <-sup.drains:
		if got != "maintenance by alice" {
			t.Fatalf("drain %q, want %q", got, "maintenance by alice")
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the drain did not reach the supervisor within 60 s")
	}
	next("the drain's ack to agg-1", func(s meshSend) bool {
		a := s.env.GetAck()
		return s.to == "agg-1" && a.GetId() == "c1" && a.GetOk() && a.GetMeta().GetState() == gwpb.State_STATE_DOWN
	})
}
