package relay

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/nodelog"
	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// sendFunc is a Sender.
type sendFunc func(node string, env *gwpb.Envelope) error

func (f sendFunc) Send(node string, env *gwpb.Envelope) error { return f(node, env) }

// Do returns when the agent answers, with its refusal as an *AgentError;
// an undelivered Control is ErrSend, one without an answer
// ErrControlTimeout once the fake clock passes the timeout.
func TestDo(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC))
	r := New(clk, 10*time.Second, slog.New(slog.DiscardHandler), nodelog.New(clk, func(string) {}))
	answer := func(ok bool, msg string) Sender {
		return sendFunc(func(node string, env *gwpb.Envelope) error {
			c := env.GetControl()
			if c.GetDeadlineMs()-c.GetAskedMs() != 10_000 {
				t.Errorf("asked %d, deadline %d: want 10 s apart", c.GetAskedMs(), c.GetDeadlineMs())
			}
			r.Deliver("other", &gwpb.ControlAck{Id: c.GetId(), Ok: true}) // from the wrong node: ignored
			r.Deliver(node, &gwpb.ControlAck{Id: c.GetId(), Ok: ok, Error: msg})
			return nil
		})
	}
	resume := func() *gwpb.Control { return &gwpb.Control{Action: gwpb.Action_ACTION_RESUME, By: "root"} }
	if err := r.Do(context.Background(), answer(true, ""), "n1", resume(), slog.LevelInfo); err != nil {
		t.Errorf("acknowledged: %v", err)
	}
	var ae *AgentError
	if err := r.Do(context.Background(), answer(false, ""), "n1", resume(), slog.LevelInfo); !errors.As(err, &ae) || ae.Msg != "no reason given" {
		t.Errorf("refused: %v", err)
	}
	unsent := sendFunc(func(string, *gwpb.Envelope) error { return errors.New("no route") })
	if err := r.Do(context.Background(), unsent, "n1", resume(), slog.LevelInfo); !errors.Is(err, ErrSend) {
		t.Errorf("not delivered: %v", err)
	}
	sent := make(chan struct{})
	silent := sendFunc(func(string, *gwpb.Envelope) error { close(sent); return nil })
	done := make(chan error, 1)
	go func() { done <- r.Do(context.Background(), silent, "n1", resume(), slog.LevelInfo) }()
	<-sent
	clk.Advance(10 * time.Second)
	select {
	case err := <-done:
		if !errors.Is(err, ErrControlTimeout) {
			t.Errorf("silent: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Do did not return after its timeout")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.waiters) != 0 {
		t.Errorf("%d waiters left", len(r.waiters))
	}
}
