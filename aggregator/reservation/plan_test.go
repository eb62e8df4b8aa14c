package reservation

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 4, 15, 0, 0, 0, time.UTC)

var testRules = rules{after: 10 * time.Second, minLeft: 5 * time.Second, window: 10 * time.Second, maxDuration: 24 * time.Hour}

// tearing is a node tearing down since since, free at freeAt.
func tearing(name string, since, freeAt time.Time) Node {
	return Node{Name: name, Tearing: true, Since: since, FreeAt: freeAt}
}

func nodeMap(nodes ...Node) map[string]Node {
	m := map[string]Node{}
	for _, n := range nodes {
		m[n.Name] = n
	}
	return m
}

// namer returns gracewatch_new1, gracewatch_new2, ...
func namer() func() string {
	i := 0
	return func() string { i++; return fmt.Sprintf("gracewatch_new%d", i) }
}

func show(rs []Reservation) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "%s %s until +%v; ", r.Name, strings.Join(r.Nodes, ","), r.End.Sub(t0))
	}
	return b.String()
}

func TestPlan(t *testing.T) {
	since := t0.Add(-20 * time.Second)
	res := func(name string, end time.Duration, nodes ...string) Reservation {
		return Reservation{Name: name, Nodes: nodes, End: t0.Add(end)}
	}
	for _, tc := range []struct {
		name  string
		nodes []Node
		have  []Reservation
		hints func(h hints)
		want  []Reservation
		wake  time.Duration // from t0; 0: none
	}{
		{name: "nothing tearing down"},
		{
			name:  "too young for a reservation",
			nodes: []Node{tearing("n1", t0.Add(-3*time.Second), t0.Add(100*time.Second))},
			wake:  7 * time.Second,
		},
		{
			name:  "old enough",
			nodes: []Node{tearing("n1", since, t0.Add(100*time.Second))},
			want:  []Reservation{res("gracewatch_new1", 100*time.Second, "n1")},
		},
		{
			name:  "free_at rounded up to the second",
			nodes: []Node{tearing("n1", since, t0.Add(100*time.Second+time.Millisecond))},
			want:  []Reservation{res("gracewatch_new1", 101*time.Second, "n1")},
		},
		{
			name:  "free within min_left: not worth it",
			nodes: []Node{tearing("n1", since, t0.Add(4*time.Second))},
		},
		{
			name:  "free within min_left but reserved already: kept",
			nodes: []Node{tearing("n1", since, t0.Add(4*time.Second))},
			have:  []Reservation{res("gracewatch_a", 4*time.Second, "n1")},
			want:  []Reservation{res("gracewatch_a", 4*time.Second, "n1")},
			wake:  4 * time.Second,
		},
		{
			name: "one job's nodes, free_at a second apart: one reservation until the latest",
			nodes: []Node{
				tearing("n1", since, t0.Add(100*time.Second+300*time.Millisecond)),
				tearing("n2", since, t0.Add(100*time.Second+900*time.Millisecond)),
				tearing("n3", since, t0.Add(101*time.Second+500*time.Millisecond)),
			},
			want: []Reservation{res("gracewatch_new1", 102*time.Second, "n1", "n2", "n3")},
		},
		{
			name: "two jobs a minute apart: two reservations",
			nodes: []Node{
				tearing("a1", since, t0.Add(100*time.Second)), tearing("a2", since, t0.Add(100*time.Second)),
				tearing("b1", since, t0.Add(160*time.Second)),
			},
			want: []Reservation{res("gracewatch_new1", 100*time.Second, "a1", "a2"), res("gracewatch_new2", 160*time.Second, "b1")},
		},
		{
			name:  "unchanged: no change",
			nodes: []Node{tearing("n1", since, t0.Add(100*time.Second)), tearing("n2", since, t0.Add(100*time.Second))},
			have:  []Reservation{res("gracewatch_a", 100*time.Second, "n1", "n2")},
			want:  []Reservation{res("gracewatch_a", 100*time.Second, "n1", "n2")},
			wake:  100 * time.Second,
		},
		{
			name:  "a node up again leaves its reservation",
			nodes: []Node{tearing("n2", since, t0.Add(100*time.Second))},
			have:  []Reservation{res("gracewatch_a", 100*time.Second, "n1", "n2")},
			want:  []Reservation{res("gracewatch_a", 100*time.Second, "n2")},
			wake:  100 * time.Second,
		},
		{
			name: "the last node up: the reservation is gone",
			have: []Reservation{res("gracewatch_a", 100*time.Second, "n1")},
			wake: 100 * time.Second,
		},
		{
			name:  "a node that joins a suiting reservation",
			nodes: []Node{tearing("n1", since, t0.Add(100*time.Second)), tearing("n2", since, t0.Add(95*time.Second))},
			have:  []Reservation{res("gracewatch_a", 100*time.Second, "n1")},
			want:  []Reservation{res("gracewatch_a", 100*time.Second, "n1", "n2")},
			wake:  100 * time.Second,
		},
		{
			name:  "a later node moves the reservation's end within the window",
			nodes: []Node{tearing("n1", since, t0.Add(100*time.Second)), tearing("n2", since, t0.Add(105*time.Second))},
			have:  []Reservation{res("gracewatch_a", 100*time.Second, "n1")},
			want:  []Reservation{res("gracewatch_a", 105*time.Second, "n1", "n2")},
			wake:  100 * time.Second,
		},
		{
			name:  "free_at moved later past the window: the reservation follows (its name kept)",
			nodes: []Node{tearing("n1", since, t0.Add(300*time.Second))},
			have:  []Reservation{res("gracewatch_a", 100*time.Second, "n1")},
			want:  []Reservation{res("gracewatch_a", 300*time.Second, "n1")},
			wake:  100 * time.Second,
		},
		{
			name:  "free_at moved later for one node of two: it gets its own",
			nodes: []Node{tearing("n1", since, t0.Add(100*time.Second)), tearing("n2", since, t0.Add(300*time.Second))},
			have:  []Reservation{res("gracewatch_a", 100*time.Second, "n1", "n2")},
			want:  []Reservation{res("gracewatch_a", 100*time.Second, "n1"), res("gracewatch_new1", 300*time.Second, "n2")},
			wake:  100 * time.Second,
		},
		{
			name:  "a node held twice keeps the first by name",
			nodes: []Node{tearing("n1", since, t0.Add(100*time.Second))},
			have:  []Reservation{res("gracewatch_b", 100*time.Second, "n1"), res("gracewatch_a", 100*time.Second, "n1")},
			want:  []Reservation{res("gracewatch_a", 100*time.Second, "n1")},
			wake:  100 * time.Second,
		},
		{
			name:  "a reservation that has ended is the scheduler's to purge",
			nodes: []Node{tearing("n1", since, t0.Add(100*time.Second))},
			have:  []Reservation{res("gracewatch_old", -time.Second, "n1")},
			want:  []Reservation{res("gracewatch_new1", 100*time.Second, "n1")},
		},
		{
			name:  "free_at three days ahead: held for max_duration",
			nodes: []Node{tearing("n1", since, t0.Add(72*time.Hour))},
			want:  []Reservation{res("gracewatch_new1", 24*time.Hour, "n1")},
		},
		{
			name:  "held for max_duration, more than half of it left: kept",
			nodes: []Node{tearing("n1", since, t0.Add(72*time.Hour))},
			have:  []Reservation{res("gracewatch_a", 13*time.Hour, "n1")},
			want:  []Reservation{res("gracewatch_a", 13*time.Hour, "n1")},
			wake:  time.Hour,
		},
		{
			name:  "held for max_duration, less than half left: held further",
			nodes: []Node{tearing("n1", since, t0.Add(72*time.Hour))},
			have:  []Reservation{res("gracewatch_a", 11*time.Hour, "n1")},
			want:  []Reservation{res("gracewatch_a", 24*time.Hour, "n1")},
			wake:  11 * time.Hour,
		},
		{
			name:  "a node whose create failed goes in smaller reservations",
			nodes: []Node{tearing("n1", since, t0.Add(100*time.Second)), tearing("n2", since, t0.Add(100*time.Second)), tearing("n3", since, t0.Add(100*time.Second))},
			hints: func(h hints) { h.maxGroup["n1"], h.maxGroup["n2"], h.maxGroup["n3"] = 1, 1, 1 },
			want: []Reservation{res("gracewatch_new1", 100*time.Second, "n1"), res("gracewatch_new2", 100*time.Second, "n2"),
				res("gracewatch_new3", 100*time.Second, "n3")},
		},
		{
			name:  "a quarantined node waits",
			nodes: []Node{tearing("n1", since, t0.Add(100*time.Second)), tearing("n2", since, t0.Add(100*time.Second))},
			hints: func(h hints) { h.quarantine["n2"] = t0.Add(time.Minute) },
			want:  []Reservation{res("gracewatch_new1", 100*time.Second, "n1")},
			wake:  time.Minute,
		},
		{
			name:  "a node whose joining update failed takes no spare name: the old reservation is deleted apart",
			nodes: []Node{tearing("n9", since, t0.Add(100*time.Second))},
			have:  []Reservation{res("gracewatch_a", 100*time.Second, "n1")},
			hints: func(h hints) { h.noJoin["n9"] = true },
			want:  []Reservation{res("gracewatch_new1", 100*time.Second, "n9")},
			wake:  100 * time.Second,
		},
		{
			name:  "a node whose joining update failed gets a reservation of its own",
			nodes: []Node{tearing("n1", since, t0.Add(100*time.Second)), tearing("n2", since, t0.Add(100*time.Second))},
			have:  []Reservation{res("gracewatch_a", 100*time.Second, "n1")},
			hints: func(h hints) { h.noJoin["n2"] = true },
			want:  []Reservation{res("gracewatch_a", 100*time.Second, "n1"), res("gracewatch_new1", 100*time.Second, "n2")},
			wake:  100 * time.Second,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHints()
			if tc.hints != nil {
				tc.hints(h)
			}
			got, wake := plan(planInput{now: t0, rules: testRules, nodes: nodeMap(tc.nodes...), have: tc.have, hints: h, newName: namer()})
			if show(got) != show(tc.want) {
				t.Errorf("plan:\n got %s\nwant %s", show(got), show(tc.want))
			}
			var wantWake time.Time
			if tc.wake != 0 {
				wantWake = t0.Add(tc.wake)
			}
			if !wake.Equal(wantWake) {
				t.Errorf("wake at %v, want %v", wake.Sub(t0), tc.wake)
			}
		})
	}
}

// TestPlanOneJobOfAThousandNodes: the nodes of one job, whose free_at
// spread over two seconds, are one reservation; the plan of the next round
// is the same (nothing to do).
func TestPlanOneJobOfAThousandNodes(t *testing.T) {
	nodes := map[string]Node{}
	for i := range 1000 {
		name := fmt.Sprintf("node%04d", i)
		nodes[name] = tearing(name, t0.Add(-time.Minute), t0.Add(100*time.Second+time.Duration(i)*2*time.Millisecond))
	}
	got, _ := plan(planInput{now: t0, rules: testRules, nodes: nodes, hints: newHints(), newName: namer()})
	if len(got) != 1 || len(got[0].Nodes) != 1000 || !got[0].End.Equal(t0.Add(102*time.Second)) {
		t.Fatalf("got %d reservations (first: %d nodes until +%v), want one of 1000 until +102s", len(got), len(got[0].Nodes), got[0].End.Sub(t0))
	}
	again, _ := plan(planInput{now: t0.Add(time.Second), rules: testRules, nodes: nodes, have: got, hints: newHints(), newName: namer()})
	if ops := diff(t0.Add(time.Second), got, again); len(ops) != 0 {
		t.Errorf("the next round changes %d reservations, want none", len(ops))
	}
}

// TestPlanSplitsPastMaxNodes: more nodes than a reservation may hold.
func TestPlanSplitsPastMaxNodes(t *testing.T) {
	nodes := map[string]Node{}
	for i := range MaxNodes + 10 {
		name := fmt.Sprintf("node%05d", i)
		nodes[name] = tearing(name, t0.Add(-time.Minute), t0.Add(100*time.Second))
	}
	got, _ := plan(planInput{now: t0, rules: testRules, nodes: nodes, hints: newHints(), newName: namer()})
	if len(got) != 2 || len(got[0].Nodes)+len(got[1].Nodes) != MaxNodes+10 || max(len(got[0].Nodes), len(got[1].Nodes)) != MaxNodes {
		t.Fatalf("got %d reservations, want 2 (%d and 10 nodes)", len(got), MaxNodes)
	}
}

func TestDiff(t *testing.T) {
	r := func(name string, end time.Duration, nodes ...string) Reservation {
		return Reservation{Name: name, Nodes: nodes, End: t0.Add(end)}
	}
	have := []Reservation{r("g_a", time.Minute, "n1", "n2"), r("g_b", time.Minute, "n3"), r("g_c", time.Minute, "n4"), r("g_ended", -time.Second, "n5")}
	want := []Reservation{r("g_a", time.Minute, "n1", "n2"), r("g_b", 2*time.Minute, "n3", "n6"), r("g_d", time.Minute, "n7")}
	var got []string
	for _, o := range diff(t0, have, want) {
		got = append(got, fmt.Sprintf("%s %s %v", o.verb, o.res.Name, o.added))
	}
	wantOps := []string{"delete g_c []", "update g_b [n6]", "create g_d []"}
	if !slices.Equal(got, wantOps) {
		t.Errorf("diff = %q, want %q", got, wantOps)
	}
}
