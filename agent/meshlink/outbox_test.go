package meshlink

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
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// TestEveryReleasedTeardownDelivered: a busy node releases 300 short jobs
// one after the other, its status holding only the latest 64 released (as
// the supervisor's maxReleased), while its one aggregator is unreachable
// for the first 120 releases (within the outbox's reach of 128). Every
// release still reaches the aggregator with its released_ms, user and
// command, no update carries more than maxUpdateTeardowns, and every
// teardown an update carries again lies within the last maxUndelivered
// releases (the history's dedupe window); once all are delivered the
// outbox is empty.
func TestEveryReleasedTeardownDelivered(t *testing.T) {
	const jobs, away, keep = 300, 120, 64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	up := false
	latest := 0 // the latest job released
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
			var n int
			fmt.Sscan(td.GetJob(), &n)
			if latest-n >= maxUndelivered {
				return fmt.Errorf("job %d sent again %d releases later, past the dedupe window", n, latest-n)
			}
			if td.GetReleasedMs() == 0 || td.GetUser() == "" || td.GetCommand() != "epilog.sh" {
				return fmt.Errorf("teardown record %v lacks its release, user or command", td)
			}
			got[td.GetJob()] = td.GetReleasedMs()
		}
		return nil
	}
	l := &running{Link: New(slog.New(slog.DiscardHandler), nil), m: fakeMesh{aggregators: []string{"agg1"}}}
	l.sender = newStateSender(ctx, send, clock.NewFake(time.Unix(1_800_000_000, 0)), slog.New(slog.DiscardHandler))
	l.sender.writes = 1 // the clock stands still: one write delivers (the confirming write has its own tests)
	defer l.sender.close()
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
		if !testutil.Poll(30*time.Second, func() bool { return l.sender.deliveredAll() >= v }) {
			t.Fatalf("version %d not delivered (delivered up to %d)", v, l.sender.deliveredAll())
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
		mu.Lock()
		latest = i
		mu.Unlock()
		st := teardown.Status{Node: "n1", State: teardown.StateUp, Seq: uint64(i + 1), Jobs: append([]teardown.Job{}, released...)}
		l.OnChange(st)
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

// TestOutboxReach: an aggregator away for more releases than the outbox
// reaches loses the oldest (bounded memory), never more than it must.
func TestOutboxReach(t *testing.T) {
	o := newOutbox(slog.New(slog.DiscardHandler))
	base := time.UnixMilli(1_800_000_000_000)
	var released []teardown.Job
	for i := range 500 {
		at := base.Add(time.Duration(i) * time.Second)
		released = append(released, teardown.Job{ID: fmt.Sprint(i), Phase: teardown.PhaseReleased, Grace: time.Minute,
			Deadline: at.Add(time.Minute), Released: at})
		if len(released) > 64 {
			released = released[1:]
		}
		o.take(teardown.Status{Jobs: released})
		o.prune(0, at)
		if len(o.entries) > maxUndelivered {
			t.Fatalf("after %d releases the outbox holds %d", i+1, len(o.entries))
		}
	}
	if len(o.entries) != maxUndelivered {
		t.Errorf("the outbox holds %d records, want the last %d", len(o.entries), maxUndelivered)
	}
	o.prune(0, base.Add(500*time.Second+undeliveredMaxAge+time.Second))
	if len(o.entries) != 0 {
		t.Errorf("%d records older than %v kept", len(o.entries), undeliveredMaxAge)
	}
}
