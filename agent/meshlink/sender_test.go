package meshlink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// fakeSends is a sendFunc whose every call blocks until the test answers
// it (or its ctx ends), so that tests decide which attempt hangs, fails or
// succeeds, and when.
type fakeSends struct {
	clk *clock.Fake

	mu        sync.Mutex
	calls     []*fakeCall
	inFlight  int
	maxFlight int
	delivered map[string][]uint64 // node -> seqs delivered, in order
}

type fakeCall struct {
	node   string
	seq    uint64
	at     time.Time
	answer chan error
}

func newFakeSends(clk *clock.Fake) *fakeSends {
	return &fakeSends{clk: clk, delivered: map[string][]uint64{}}
}

func (f *fakeSends) send(ctx context.Context, node string, u *gwpb.StateUpdate) error {
	c := &fakeCall{node: node, seq: u.GetMeta().GetSeq(), at: f.clk.Now(), answer: make(chan error, 1)}
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.inFlight++
	f.maxFlight = max(f.maxFlight, f.inFlight)
	f.mu.Unlock()
	var err error
	select {
	case err = <-c.answer:
	case <-ctx.Done():
		err = ctx.Err()
	}
	f.mu.Lock()
	f.inFlight--
	if err == nil {
		f.delivered[node] = append(f.delivered[node], c.seq)
	}
	f.mu.Unlock()
	return err
}

// call waits (bounded) for the i-th call (from 0) and returns it.
func (f *fakeSends) call(t *testing.T, i int) *fakeCall {
	t.Helper()
	var c *fakeCall
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("send call %d", i), func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.calls) > i {
			c = f.calls[i]
		}
		return c != nil
	})
	return c
}

func (f *fakeSends) numCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func (f *fakeSends) seqs() []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []uint64
	for _, c := range f.calls {
		out = append(out, c.seq)
	}
	return out
}

// waitDelivered waits (bounded) until node got seq.
func (f *fakeSends) waitDelivered(t *testing.T, node string, seq uint64) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("seq %d delivered to %s", seq, node), func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return slices.Contains(f.delivered[node], seq)
	})
}

func stateUpdate(seq uint64) *gwpb.StateUpdate {
	return &gwpb.StateUpdate{Meta: &gwpb.Meta{Incarnation: 1, Seq: seq}}
}

// newTestSender returns a sender on a fake clock and fake sends, closed
// (after its ctx is cancelled) when the test ends. One write of a state
// delivers it: the tests of attempts, back-off and slots answer each call
// themselves; the confirming write has tests of its own
// (newConfirmingSender).
func newTestSender(t *testing.T) (*stateSender, *fakeSends, *clock.Fake, context.CancelFunc) {
	t.Helper()
	s, f, clk, cancel := newConfirmingSender(t)
	s.writes = 1
	return s, f, clk, cancel
}

// newConfirmingSender is newTestSender with the sender's own count of
// writes (sendWrites).
func newConfirmingSender(t *testing.T) (*stateSender, *fakeSends, *clock.Fake, context.CancelFunc) {
	t.Helper()
	clk := clock.NewFake(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	f := newFakeSends(clk)
	ctx, cancel := context.WithCancel(context.Background())
	s := newStateSender(ctx, f.send, clk, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { cancel(); s.close() })
	return s, f, clk, cancel
}

// A write that returned is no delivery (the bytes may sit in TCP's
// retransmission): each state is written a second time, over a connection
// of its own, sendRetryFirst after the first attempt started, and only
// then counts as delivered; no third write follows.
func TestStateSenderWritesEachStateTwice(t *testing.T) {
	s, f, clk, _ := newConfirmingSender(t)
	start := clk.Now()
	s.publish(stateUpdate(4), []string{"agg"})
	f.call(t, 0).answer <- nil
	f.waitDelivered(t, "agg", 4)
	if got := s.deliveredAll(); got != 0 {
		t.Fatalf("deliveredAll %d after one write, want 0: a write is no delivery", got)
	}
	clk.Set(start.Add(sendRetryFirst - time.Millisecond))
	if n := f.numCalls(); n != 1 {
		t.Fatalf("%d calls before sendRetryFirst, want 1", n)
	}
	clk.Set(start.Add(sendRetryFirst))
	second := f.call(t, 1)
	if second.seq != 4 || !second.at.Equal(start.Add(sendRetryFirst)) {
		t.Fatalf("second write: seq %d at %v, want seq 4 at %v", second.seq, second.at.Sub(start), sendRetryFirst)
	}
	second.answer <- nil
	testutil.Eventually(t, 10*time.Second, "seq 4 delivered", func() bool { return s.deliveredAll() == 1 })
	settled(t, s, clk)
	clk.Advance(time.Hour)
	if n := f.numCalls(); n != 2 {
		t.Errorf("%d calls, want 2: two writes, then nothing", n)
	}
}

// A confirming write that fails is retried on the back-off; a newer state
// published between the two writes of an older one gets two writes of its
// own, and the older one no more.
func TestStateSenderConfirmingWriteRetriedAndOvertaken(t *testing.T) {
	s, f, clk, _ := newConfirmingSender(t)
	start := clk.Now()
	s.publish(stateUpdate(1), []string{"agg"})
	f.call(t, 0).answer <- nil
	clk.Set(start.Add(sendRetryFirst))
	f.call(t, 1).answer <- errors.New("connection reset by peer")
	clk.Set(start.Add(sendRetryFirst + 2*sendRetryFirst)) // the back-off doubled
	third := f.call(t, 2)
	if third.seq != 1 {
		t.Fatalf("the retried confirming write carries seq %d, want 1", third.seq)
	}
	third.answer <- nil
	testutil.Eventually(t, 10*time.Second, "seq 1 delivered", func() bool { return s.deliveredAll() == 1 })
	settled(t, s, clk)

	at := clk.Now()
	s.publish(stateUpdate(2), []string{"agg"})
	f.call(t, 3).answer <- nil
	s.publish(stateUpdate(3), []string{"agg"})
	f.call(t, 4).answer <- nil
	clk.Set(at.Add(sendRetryFirst))
	f.call(t, 5).answer <- nil
	testutil.Eventually(t, 10*time.Second, "seq 3 delivered", func() bool { return s.deliveredAll() == 3 })
	settled(t, s, clk)
	clk.Advance(time.Hour)
	if got := f.seqs(); !slices.Equal(got, []uint64{1, 1, 1, 2, 3, 3}) {
		t.Errorf("sends %v, want [1 1 1 2 3 3]: seq 2, replaced, is not confirmed", got)
	}
}

// settled waits until no attempt is in flight and checks that no retry is
// armed.
func settled(t *testing.T, s *stateSender, clk *clock.Fake) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "no attempt in flight", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, tg := range s.targets {
			if tg.inFlight > 0 {
				return false
			}
		}
		return true
	})
	if n := clk.Pending(); n != 0 {
		t.Errorf("%d retries armed, want none", n)
	}
}

func TestStateSenderNewerOvertakesAStuckSend(t *testing.T) {
	s, f, clk, _ := newTestSender(t)
	s.publish(stateUpdate(1), []string{"agg"})
	stuck := f.call(t, 0) // its connect hangs
	s.publish(stateUpdate(2), []string{"agg"})
	newer := f.call(t, 1)
	if newer.seq != 2 {
		t.Fatalf("second send carries seq %d, want 2", newer.seq)
	}
	newer.answer <- nil
	f.waitDelivered(t, "agg", 2)
	stuck.answer <- errors.New("i/o timeout")
	settled(t, s, clk)
	clk.Advance(time.Minute)
	if got := f.seqs(); !slices.Equal(got, []uint64{1, 2}) {
		t.Errorf("sends %v, want [1 2]: the stale one is not retried once a newer one is delivered", got)
	}
}

func TestStateSenderRetriesTheLatestWithBackoff(t *testing.T) {
	s, f, clk, _ := newTestSender(t)
	start := clk.Now()
	s.publish(stateUpdate(7), []string{"agg"})
	wantAt := []time.Duration{0, 500 * time.Millisecond, 1500 * time.Millisecond, 3500 * time.Millisecond}
	for i, at := range wantAt {
		if i > 0 {
			clk.Set(start.Add(at - time.Millisecond))
			if n := f.numCalls(); n != i {
				t.Fatalf("attempt %d started before its back-off (%d calls at %v)", i+1, n, at-time.Millisecond)
			}
			clk.Set(start.Add(at))
		}
		c := f.call(t, i)
		if c.seq != 7 || !c.at.Equal(start.Add(at)) {
			t.Fatalf("attempt %d: seq %d at %v, want seq 7 at %v", i+1, c.seq, c.at.Sub(start), at)
		}
		if i < len(wantAt)-1 {
			c.answer <- errors.New("connection refused")
		} else {
			c.answer <- nil
		}
	}
	f.waitDelivered(t, "agg", 7)
	settled(t, s, clk)
}

func TestStateSenderStartsAFreshAttemptWhileOneHangs(t *testing.T) {
	s, f, clk, _ := newTestSender(t)
	s.publish(stateUpdate(3), []string{"agg"})
	hung := f.call(t, 0)
	clk.Advance(sendRetryFirst)
	fresh := f.call(t, 1)
	if fresh.seq != 3 {
		t.Fatalf("fresh attempt carries seq %d, want 3", fresh.seq)
	}
	fresh.answer <- nil
	f.waitDelivered(t, "agg", 3)
	testutil.Eventually(t, 10*time.Second, "the retry disarmed", func() bool { return clk.Pending() == 0 })
	hung.answer <- errors.New("i/o timeout")
	settled(t, s, clk)
}

func TestStateSenderBoundsAttemptsAndDropsStaleStates(t *testing.T) {
	s, f, clk, _ := newTestSender(t)
	s.maxInFlight = 2
	s.publish(stateUpdate(1), []string{"agg"})
	first := f.call(t, 0)
	s.publish(stateUpdate(2), []string{"agg"})
	f.call(t, 1)
	for seq := uint64(3); seq <= 5; seq++ {
		s.publish(stateUpdate(seq), []string{"agg"})
	}
	clk.Advance(time.Minute) // retries are due, but no slot is free
	if n := f.numCalls(); n != 2 {
		t.Fatalf("%d sends with every slot taken, want 2", n)
	}
	first.answer <- errors.New("i/o timeout")
	latest := f.call(t, 2)
	if latest.seq != 5 {
		t.Fatalf("the freed slot sent seq %d, want the latest, 5", latest.seq)
	}
	latest.answer <- nil
	f.waitDelivered(t, "agg", 5)
	f.call(t, 1).answer <- nil
	settled(t, s, clk)
	if got := f.seqs(); !slices.Equal(got, []uint64{1, 2, 5}) {
		t.Errorf("sends %v, want [1 2 5]: 3 and 4 were replaced before their turn", got)
	}
	if f.maxFlight > 2 {
		t.Errorf("%d sends in flight at once, want at most 2", f.maxFlight)
	}
}

func TestStateSenderStopsForMembersThatAreGone(t *testing.T) {
	s, f, clk, _ := newTestSender(t)
	s.publish(stateUpdate(1), []string{"agg-1", "agg-2"})
	for _, c := range []*fakeCall{f.call(t, 0), f.call(t, 1)} {
		if c.node == "agg-1" {
			c.answer <- fmt.Errorf("send to agg-1: %w", mesh.ErrNotAlive)
		} else {
			c.answer <- errors.New("connection refused")
		}
	}
	// agg-2 left the member list before its retry.
	testutil.Eventually(t, 10*time.Second, "both attempts returned", func() bool { return f.numCalls() == 2 && f.inFlightNow() == 0 })
	s.publish(stateUpdate(2), []string{"agg-3"})
	f.call(t, 2).answer <- nil
	f.waitDelivered(t, "agg-3", 2)
	settled(t, s, clk)
	clk.Advance(time.Hour)
	if n := f.numCalls(); n != 3 {
		t.Errorf("%d sends, want 3: no retry to a dead member or one no longer listed", n)
	}
}

func (f *fakeSends) inFlightNow() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inFlight
}

func TestStateSenderCloseLeavesNothingBehind(t *testing.T) {
	s, f, clk, cancel := newTestSender(t)
	s.publish(stateUpdate(1), []string{"agg-1", "agg-2"})
	f.call(t, 1)
	clk.Advance(sendRetryFirst)
	f.call(t, 3) // a second, hedging attempt to each
	cancel()
	closed := make(chan struct{})
	go func() { s.close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("close did not return after ctx ended")
	}
	if n := f.inFlightNow(); n != 0 {
		t.Errorf("%d sends still in flight after close", n)
	}
	if n := clk.Pending(); n != 0 {
		t.Errorf("%d retries still armed after close", n)
	}
	s.publish(stateUpdate(2), []string{"agg-1"})
	clk.Advance(time.Hour)
	if n := f.numCalls(); n != 4 {
		t.Errorf("%d sends, want 4: nothing starts after close", n)
	}
}

// resend delivers the latest state again to one target that has it (an
// aggregator's probe, or a recheck of one that gossip lost), once; a target
// that is not among the current ones is ignored.
func TestStateSenderResend(t *testing.T) {
	s, f, clk, _ := newTestSender(t)
	s.publish(stateUpdate(1), []string{"agg-1", "agg-2"})
	f.call(t, 0).answer <- nil
	f.call(t, 1).answer <- nil
	f.waitDelivered(t, "agg-1", 1)
	f.waitDelivered(t, "agg-2", 1)
	settled(t, s, clk)
	s.resend("agg-2")
	s.resend("agg-9")
	c := f.call(t, 2)
	if c.node != "agg-2" || c.seq != 1 {
		t.Fatalf("resend: call to %s of seq %d, want agg-2 seq 1", c.node, c.seq)
	}
	c.answer <- nil
	settled(t, s, clk)
	if n := f.numCalls(); n != 3 {
		t.Errorf("%d calls, want 3 (one resend)", n)
	}
}
