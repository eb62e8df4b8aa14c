package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/teardown"
	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// TestEveryReleasedTeardownDelivered: a busy node releases 300 short jobs
// one after the other, its status holding only the latest 64 released (as
// the supervisor's maxReleased), while its one aggregator is unreachable
// for the first 200 releases. Every release still reaches the aggregator
// with its released_ms, user and command, and no update carries more than
// maxUpdateTeardowns; once all are delivered the outbox is empty.
func TestEveryReleasedTeardownDelivered(t *testing.T) {
	const jobs, away, keep = 300, 200, 64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	up := false
	got := map[string]int64{}
	biggest := 0
	send := func(_ context.Context, _ string, u *gwpb.StateUpdate) error {
		mu.Lock()
		defer mu.Unlock()
		if !up {
			return errors.New("connection refused")
		}
		biggest = max(biggest, len(u.GetTeardowns()))
		for _, td := range u.GetTeardowns() {
			if td.GetReleasedMs() == 0 || td.GetUser() == "" || td.GetCommand() != "epilog.sh" {
				return fmt.Errorf("teardown record %v lacks its release, user or command", td)
			}
			got[td.GetJob()] = td.GetReleasedMs()
		}
		return nil
	}
	l := newMeshLink(nil, slog.New(slog.DiscardHandler))
	l.sender = newStateSender(ctx, send, clock.NewFake(time.Unix(1_800_000_000, 0)), slog.New(slog.DiscardHandler))
	defer l.sender.close()
	l.targetsOf = func() []string { return []string{"agg1"} }
	base := time.UnixMilli(1_800_000_000_000)
	now := base
	l.now = func() time.Time { return now }
	var released []teardown.Job
	publishAndSettle := func() {
		t.Helper()
		l.publish()
		mu.Lock()
		isUp := up
		mu.Unlock()
		if !isUp {
			return
		}
		v := l.sender.version
		deadline := time.Now().Add(5 * time.Second)
		for l.sender.deliveredAll() < v {
			if time.Now().After(deadline) {
				t.Fatalf("version %d not delivered", v)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for i := range jobs {
		now = now.Add(time.Second)
		released = append(released, teardown.Job{ID: fmt.Sprint(i), Phase: teardown.PhaseReleased, Grace: time.Minute,
			Ended: now.Add(-2 * time.Second), Deadline: now.Add(58 * time.Second), Released: now, Outcome: "clean",
			User: "alice", Command: "epilog.sh"})
		if len(released) > keep {
			released = released[1:]
		}
		st := teardown.Status{Node: "n1", State: teardown.StateUp, Seq: uint64(i + 1), Jobs: append([]teardown.Job{}, released...)}
		l.onChange(st)
		if i == away {
			mu.Lock()
			up = true
			mu.Unlock()
		}
		publishAndSettle()
	}
	// The node goes quiet: the link's periodic publish (recheckEvery)
	// sends what still waits.
	for n := 0; l.out.waiting() && n < jobs; n++ {
		publishAndSettle()
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range jobs {
		if _, ok := got[fmt.Sprint(i)]; !ok {
			t.Errorf("job %d never reached the aggregator", i)
		}
	}
	if biggest > maxUpdateTeardowns {
		t.Errorf("an update carried %d teardowns, more than %d", biggest, maxUpdateTeardowns)
	}
	l.publish() // prunes what every target has
	if n := len(l.out.entries); n != 0 {
		t.Errorf("%d records left in the outbox after every one was delivered", n)
	}
}
