package reservation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/config"
	gwtestutil "github.com/gracewatch/gracewatch/internal/testutil"
)

// commaLists are hostlists without compression, for the tests.
var commaLists = Hostlists{
	Compress: func(n []string) (string, error) { return strings.Join(n, ","), nil },
	Expand:   func(s string) ([]string, error) { return strings.Split(s, ","), nil },
}

func testConfig() Config {
	c := DefaultConfig()
	c.Command = []string{"unused"}
	return c
}

// newTestPlanner returns a planner on a fake clock at t0 and a fake
// scheduler; tests call round themselves, one at a time.
func newTestPlanner(t *testing.T, cfg Config) (*Planner, *FakeScheduler, *clock.Fake, *prometheus.Registry) {
	t.Helper()
	sched := NewFakeScheduler()
	clk := clock.NewFake(t0)
	reg := prometheus.NewRegistry()
	p, err := New(Options{Config: cfg, Scheduler: sched, Hostlists: commaLists, Clock: clk, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	return p, sched, clk, reg
}

// held returns what the fake scheduler holds of gracewatch's, as
// "nodes@end" sorted, names left out (they are random).
func held(f *FakeScheduler, prefix string) []string {
	var out []string
	for _, r := range f.Reservations() {
		if strings.HasPrefix(r.Name, prefix) {
			out = append(out, fmt.Sprintf("%s@+%v", strings.Join(r.Nodes, ","), r.End.Sub(t0)))
		}
	}
	slices.Sort(out)
	return out
}

func TestPlannerActsOnlyWhileLeading(t *testing.T) {
	p, sched, clk, _ := newTestPlanner(t, testConfig())
	ctx := context.Background()
	p.Observe(tearing("n1", t0.Add(-time.Minute), t0.Add(100*time.Second)))
	p.round(ctx)
	if sched.Calls("list")+sched.Calls("create") != 0 {
		t.Fatal("a planner that does not lead ran commands")
	}
	p.SetLeader(true)
	p.round(ctx)
	if got := held(sched, DefaultPrefix); !slices.Equal(got, []string{"n1@+1m40s"}) {
		t.Fatalf("held %v, want n1 until +100s", got)
	}
	if st := p.Status(); !st.Leader || len(st.Reservations) != 1 {
		t.Errorf("status %+v, want the leader with one reservation", st)
	}
	p.SetLeader(false)
	clk.Advance(2 * time.Second)
	p.round(ctx)
	p.Observe(Node{Name: "n1"})
	clk.Advance(2 * time.Second)
	p.round(ctx)
	if sched.Calls("delete") != 0 || len(held(sched, DefaultPrefix)) != 1 {
		t.Error("a planner that lost the lead changed the reservations (the new leader owns them)")
	}
	if st := p.Status(); st.Leader || len(st.Reservations) != 0 {
		t.Errorf("status %+v, want no leader and no reservations", st)
	}
}

// TestPlannerOneJobOfAThousandNodes: 1,000 nodes tearing down with one
// free_at, whose teardowns end over four seconds: a list, a create, one
// update per round while they end, and a delete.
func TestPlannerOneJobOfAThousandNodes(t *testing.T) {
	p, sched, clk, _ := newTestPlanner(t, testConfig())
	ctx := context.Background()
	p.SetLeader(true)
	var names []string
	for i := range 1000 {
		name := fmt.Sprintf("node%04d", i)
		names = append(names, name)
		p.Observe(tearing(name, t0, t0.Add(120*time.Second)))
	}
	p.round(ctx)
	if sched.Calls("create") != 0 {
		t.Fatal("reserved before the teardowns were 10 s old")
	}
	if want := t0.Add(DefaultAfter); !p.timerAt.Equal(want) {
		t.Errorf("next round at %v, want at +10s", p.timerAt.Sub(t0))
	}
	clk.Set(t0.Add(DefaultAfter))
	p.round(ctx)
	if got := held(sched, DefaultPrefix); len(got) != 1 || !strings.HasSuffix(got[0], "@+2m0s") {
		t.Fatalf("held %d reservations, want one until +120s", len(got))
	}
	// They end 25 every 100 ms; a round runs whenever the planner is
	// free to (at most one a second).
	for i := 0; i < len(names); i += 25 {
		for _, n := range names[i : i+25] {
			p.Observe(Node{Name: n})
		}
		clk.Advance(100 * time.Millisecond)
		p.round(ctx)
	}
	clk.Advance(time.Second)
	p.round(ctx)
	if got := held(sched, DefaultPrefix); len(got) != 0 {
		t.Fatalf("still held: %v", got)
	}
	calls := sched.Calls("list") + sched.Calls("create") + sched.Calls("update") + sched.Calls("delete")
	t.Logf("commands: %d (list %d, create %d, update %d, delete %d)", calls,
		sched.Calls("list"), sched.Calls("create"), sched.Calls("update"), sched.Calls("delete"))
	// 1 list + 1 create + at most one update per second of the four
	// seconds the teardowns took to end + 1 delete.
	if sched.Calls("create") != 1 || sched.Calls("delete") != 1 || sched.Calls("update") > 4 || calls > 7 {
		t.Errorf("%d commands, want at most 7", calls)
	}
}

// TestPlannerAdoptsWhatItFinds: a new leader lists what the scheduler
// holds, keeps what the view calls for, removes what it does not, and
// never touches an administrator's reservation.
func TestPlannerAdoptsWhatItFinds(t *testing.T) {
	p, sched, _, _ := newTestPlanner(t, testConfig())
	ctx := context.Background()
	maint := Reservation{Name: "maint_n2", Nodes: []string{"n2"}, End: t0.Add(time.Hour)}
	sched.Put(maint)
	sched.Put(Reservation{Name: "gracewatch_old", Nodes: []string{"n1", "n2"}, End: t0.Add(100 * time.Second)})
	sched.Put(Reservation{Name: "gracewatch_orphan", Nodes: []string{"n3"}, End: t0.Add(50 * time.Second)})
	// The previous leader reserved n1 and n2; n2 is up since, n3 too.
	p.Observe(tearing("n1", t0.Add(-time.Minute), t0.Add(100*time.Second)))
	p.SetLeader(true)
	p.round(ctx)
	got := sched.Reservations()
	if len(got) != 2 || got[0].Name != "gracewatch_old" || !slices.Equal(got[0].Nodes, []string{"n1"}) || got[1].Name != "maint_n2" {
		t.Fatalf("the scheduler holds %+v, want gracewatch_old with n1 only and maint_n2", got)
	}
	if !slices.Equal(got[1].Nodes, maint.Nodes) || !got[1].End.Equal(maint.End) {
		t.Errorf("the administrator's reservation changed: %+v", got[1])
	}
	if sched.Calls("create") != 0 {
		t.Errorf("%d creates, want none (n1's reservation is adopted)", sched.Calls("create"))
	}
}

// TestPlannerNarrowsARefusal: the scheduler refuses a node it does not
// know; the others are reserved all the same, in log2(n) rounds.
func TestPlannerNarrowsARefusal(t *testing.T) {
	p, sched, clk, _ := newTestPlanner(t, testConfig())
	ctx := context.Background()
	sched.Unknown = map[string]bool{"n5": true}
	p.SetLeader(true)
	for i := 1; i <= 8; i++ {
		p.Observe(tearing(fmt.Sprintf("n%d", i), t0.Add(-time.Minute), t0.Add(30*time.Minute)))
	}
	for range 4 {
		p.round(ctx)
		clk.Advance(time.Minute)
	}
	got := held(sched, DefaultPrefix)
	var nodes []string
	for _, h := range got {
		n, _, _ := strings.Cut(h, "@")
		nodes = append(nodes, strings.Split(n, ",")...)
	}
	slices.Sort(nodes)
	if want := []string{"n1", "n2", "n3", "n4", "n6", "n7", "n8"}; !slices.Equal(nodes, want) {
		t.Fatalf("held %v, want %v", nodes, want)
	}
	// 8 refused, 4+4 (one refused), 2+2 (one refused), 1+1 (one refused):
	// then n5 waits in quarantine.
	if c := sched.Calls("create"); c > 7 {
		t.Errorf("%d creates, want at most 7", c)
	}
	if c := sched.Calls("update"); c != 0 {
		t.Errorf("%d updates, want none (a node refused in a group does not join a larger one)", c)
	}
	// n5 alone is tried again after 1, 2, 4 minutes.
	var retries []time.Duration
	for range 8 * 60 {
		before := sched.Calls("create")
		p.round(ctx)
		if sched.Calls("create") > before {
			retries = append(retries, clk.Now().Sub(t0))
		}
		clk.Advance(time.Second)
	}
	if len(retries) != 3 || retries[1]-retries[0] != 2*time.Minute || retries[2]-retries[1] != 4*time.Minute {
		t.Errorf("n5 tried again at %v, want 2 then 4 minutes apart", retries)
	}
}

func TestPlannerBacksOffAndRecovers(t *testing.T) {
	p, sched, clk, reg := newTestPlanner(t, testConfig())
	ctx := context.Background()
	broken := errors.New("slurmctld does not answer")
	sched.Fail = func(string, Reservation) error { return broken }
	p.SetLeader(true)
	p.Observe(tearing("n1", t0.Add(-time.Minute), t0.Add(10*time.Minute)))
	var waits []time.Duration
	for range 4 {
		p.round(ctx)
		waits = append(waits, p.notBefore.Sub(clk.Now()))
		clk.Set(p.notBefore)
	}
	if want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}; !slices.Equal(waits, want) {
		t.Errorf("back-off %v, want %v", waits, want)
	}
	if st := p.Status(); !strings.Contains(st.Error, "slurmctld does not answer") {
		t.Errorf("status error %q", st.Error)
	}
	if v := testutil.ToFloat64(p.met.gauges[2]); v != 1 {
		t.Errorf("reservations_failing = %v, want 1", v)
	}
	if n, err := testutil.GatherAndCount(reg, "gracewatch_aggregator_reservation_commands_total"); err != nil || n != 12 {
		t.Errorf("%d command series (%v), want 12", n, err)
	}
	sched.Fail = nil
	p.round(ctx)
	if got := held(sched, DefaultPrefix); len(got) != 1 {
		t.Fatalf("held %v after recovery", got)
	}
	if st := p.Status(); st.Error != "" {
		t.Errorf("status error %q after recovery", st.Error)
	}
}

// TestPlannerRun: the loop runs rounds on its own, by the clock's timers.
func TestPlannerRun(t *testing.T) {
	p, sched, clk, _ := newTestPlanner(t, testConfig())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	p.SetLeader(true)
	p.Observe(tearing("n1", t0, t0.Add(100*time.Second)))
	waitFor(t, "the first list", func() bool { return sched.Calls("list") == 1 })
	waitFor(t, "the timer of the teardown's tenth second", func() bool { return clk.Pending() > 0 })
	clk.Advance(DefaultAfter)
	waitFor(t, "a reservation", func() bool { return len(held(sched, DefaultPrefix)) == 1 })
	p.Observe(Node{Name: "n1"})
	waitFor(t, "its deletion", func() bool {
		clk.Advance(100 * time.Millisecond)
		return len(held(sched, DefaultPrefix)) == 0
	})
}

// waitFor is testutil.Eventually with 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	gwtestutil.Eventually(t, 10*time.Second, what, cond)
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate("reservations"); err != nil {
		t.Errorf("defaults: %v", err)
	}
	c := DefaultConfig()
	c.Command = []string{""}
	c.Prefix = "bad prefix"
	c.Interval = config.Dur(0)
	c.Window = config.Dur(-time.Second)
	err := c.Validate("reservations")
	for _, key := range []string{"reservations.command", "reservations.prefix", "reservations.interval", "reservations.window"} {
		if err == nil || !strings.Contains(err.Error(), `"`+key+`"`) {
			t.Errorf("no error naming %s: %v", key, err)
		}
	}
}

// TestPlannerGivesBackAFreeNode: n1 is reserved, then up; n9, which the
// scheduler does not know, tears down. The update that would move n1's
// reservation to n9 fails; n1 must not stay held with it.
func TestPlannerGivesBackAFreeNode(t *testing.T) {
	p, sched, clk, _ := newTestPlanner(t, testConfig())
	ctx := context.Background()
	sched.Unknown = map[string]bool{"n9": true}
	p.SetLeader(true)
	p.Observe(tearing("n1", t0.Add(-time.Minute), t0.Add(10*time.Minute)))
	p.round(ctx)
	if got := held(sched, DefaultPrefix); len(got) != 1 {
		t.Fatalf("held %v", got)
	}
	p.Observe(Node{Name: "n1"})
	p.Observe(tearing("n9", t0.Add(-time.Minute), t0.Add(10*time.Minute)))
	for range 3 {
		clk.Set(p.notBefore)
		p.round(ctx)
	}
	if got := held(sched, DefaultPrefix); len(got) != 0 {
		t.Errorf("still held after three rounds: %v (n1 is up, n9 unknown)", got)
	}
	if _, ok := p.hints.quarantine["n9"]; !ok {
		t.Error("n9 is not quarantined")
	}
}
