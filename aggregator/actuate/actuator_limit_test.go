package actuate

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/incident"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/config"
	"github.com/gracewatch/gracewatch/internal/testutil"
)

// limitFixture is the actuators alone, leading, with an on="down" actuator
// that logs its node (and an on="up" one, which undrains a node that comes
// back), the blast-radius limit at 2 nodes an hour, and a fake
// clock.
type limitFixture struct {
	t       *testing.T
	a       *Actuators
	clk     *clock.Fake
	downLog string
}

func newLimitFixture(t *testing.T) *limitFixture {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join(dir, "act.sh")
	if err := os.WriteFile(script, []byte(testutil.LogScript), 0o755); err != nil {
		t.Fatal(err)
	}
	f := &limitFixture{t: t, clk: clock.NewFake(t0), downLog: filepath.Join(dir, "down.log")}
	zero := 0
	f.a = New([]Config{
		{On: OnDown, Command: []string{script, f.downLog, "{node}"}, Timeout: config.Dur(10 * time.Second), Retries: &zero},
		{On: OnUp, Command: []string{script, filepath.Join(dir, "up.log"), "{node}"}, Timeout: config.Dur(10 * time.Second), Retries: &zero},
	}, f.clk, time.Second, testLogger(t))
	f.a.SetLimit(incident.Limit{Nodes: 2, Window: time.Hour})
	f.a.SetKnown(10)
	f.a.SetLeader(true, false)
	t.Cleanup(f.a.Stop)
	return f
}

// down tells the actuators that node is down in incident id and waits for
// its drain, if admitted, to have run.
func (f *limitFixture) down(node string, id uint64) {
	f.t.Helper()
	f.a.Observe(node, view.StateDown, "hung", false, ActInfo{Incident: id, Limited: true})
	f.settle()
}

func (f *limitFixture) settle() {
	f.t.Helper()
	waitFor(f.t, "the actuators to finish", func() bool { return !f.a.Busy() })
}

// want checks the nodes drained so far (in any order: the drains let
// through at once run concurrently) and those held.
func (f *limitFixture) want(drained, held []string) {
	f.t.Helper()
	got := testutil.ReadLines(f.t, f.downLog)
	slices.Sort(got)
	drained = slices.Sorted(slices.Values(drained))
	st := f.a.LimitStatus()
	var h []string
	for _, names := range st.Held {
		h = append(h, names...)
	}
	slices.Sort(h)
	if !slices.Equal(got, drained) || !slices.Equal(h, held) {
		f.t.Fatalf("drained %q, held %q; want %q and %q", got, h, drained, held)
	}
}

// Issue 26, item B, at the actuators: a confirmation covers the nodes of
// the incident when it was confirmed, for their down then; a node that
// joins later is limited (held past the limit) until the incident is
// confirmed again; with an until, every drain of the incident before it
// is covered, and none after; a node that comes back is no longer covered;
// the incident's close forgets it.
func TestActuatorsConfirmationCovers(t *testing.T) {
	f := newLimitFixture(t)
	for _, n := range []string{"n1", "n2", "n3"} {
		f.down(n, 1)
	}
	f.want([]string{"n1", "n2"}, []string{"n3"})

	c := f.a.Confirm(1, []string{"n1", "n2", "n3"}, time.Time{})
	f.settle()
	if c.Released != 1 || !slices.Equal(c.Nodes, []string{"n1", "n2", "n3"}) || !c.Until.IsZero() || !c.At.Equal(t0) {
		t.Fatalf("confirm: %+v, want n3 released, n[1-3] covered", c)
	}
	f.want([]string{"n1", "n2", "n3"}, nil)

	// A node that joins later takes a slot: there is none (n3 took none).
	f.clk.Advance(time.Minute)
	f.down("n4", 1)
	f.want([]string{"n1", "n2", "n3"}, []string{"n4"})
	// A covered node comes back: it is no longer covered; down again, it
	// is limited like any other.
	f.a.Observe("n3", view.StateUp, "", false, ActInfo{})
	f.settle()
	if got := f.a.LimitStatus().Confirmed[1].Nodes; !slices.Equal(got, []string{"n1", "n2"}) {
		t.Fatalf("covered after n3 came back: %v, want n1 and n2", got)
	}
	f.down("n3", 1)
	f.want([]string{"n1", "n2", "n3"}, []string{"n3", "n4"})

	// Confirmed again, for 10 minutes: what is held runs, and so does every
	// drain of the incident until then; not one after.
	c = f.a.Confirm(1, []string{"n1", "n2", "n3", "n4"}, f.clk.Now().Add(10*time.Minute))
	f.settle()
	if c.Released != 2 || !c.Until.Equal(t0.Add(11*time.Minute)) {
		t.Fatalf("second confirm: %+v, want 2 released, until t0+11m", c)
	}
	f.want([]string{"n1", "n2", "n3", "n4", "n3"}, nil)
	// A shorter confirmation does not shorten it.
	if c := f.a.Confirm(1, nil, f.clk.Now().Add(time.Minute)); !c.Until.Equal(t0.Add(11 * time.Minute)) {
		t.Errorf("until %v after a shorter confirmation", c.Until)
	}
	f.clk.Advance(10*time.Minute - time.Millisecond)
	f.down("n5", 1)
	f.down("n6", 2) // another incident: not covered
	f.want([]string{"n1", "n2", "n3", "n4", "n3", "n5"}, []string{"n6"})
	f.clk.Advance(time.Millisecond)
	f.down("n7", 1)
	f.want([]string{"n1", "n2", "n3", "n4", "n3", "n5"}, []string{"n6", "n7"})
	st := f.a.LimitStatus()
	if got := st.Confirmed[1]; !slices.Equal(got.Nodes, []string{"n1", "n2", "n3", "n4", "n5"}) || !got.Until.Equal(t0.Add(11*time.Minute)) {
		t.Errorf("confirmation %+v, want n[1-5] until t0+11m", got)
	}
	if st.Used != 2 {
		t.Errorf("%d slots used, want 2 (n1 and n2's; the confirmed drains take none)", st.Used)
	}

	f.a.ForgetIncident(1)
	if _, ok := f.a.LimitStatus().Confirmed[1]; ok {
		t.Error("the closed incident's confirmation is kept")
	}
	if logged := strings.Join(testutil.ReadLines(t, f.downLog), " "); strings.Contains(logged, "n7") {
		t.Errorf("n7 drained: %s", logged)
	}
}
