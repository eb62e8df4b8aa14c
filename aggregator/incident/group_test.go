package incident

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

func fs(mnt string) Cause {
	return Cause{Kind: KindFilesystem, FSType: "fuse.hangfs", Source: "gracewatch-hangfs", Mountpoint: mnt}
}

func wchan(w string) Cause { return Cause{Kind: KindWchan, Wchan: w} }

func nodes(prefix string, from, to int, c Cause) []Node {
	var out []Node
	for i := from; i <= to; i++ {
		out = append(out, Node{Name: fmt.Sprintf("%s%d", prefix, i), Cause: c, Counts: Counts{1},
			Example: Example{PID: 100 + i, Comm: "cat", Class: "unkillable", Wchan: "request_wait_answer", Job: "7"}})
	}
	return out
}

func open(s State) []Incident {
	var out []Incident
	for _, id := range slices.Sorted(func(yield func(uint64) bool) {
		for id := range s.Open {
			if !yield(id) {
				return
			}
		}
	}) {
		out = append(out, s.Open[id])
	}
	return out
}

// Twenty nodes on one mount and two on another, going down over a few
// calls: two incidents with the right nodes, one Opened change each, ids
// that do not move.
func TestGroupTwoMounts(t *testing.T) {
	a, b := fs("/mnt/a"), fs("/mnt/b")
	all := append(nodes("n", 1, 20, a), nodes("n", 21, 22, b)...)
	var s State
	var changes []Change
	for i := 0; i < len(all); i += 5 {
		var ch []Change
		s, ch = Group(s, all[:min(i+5, len(all))], t0.Add(time.Duration(i)*time.Second), Config{})
		changes = append(changes, ch...)
	}
	incs := open(s)
	if len(incs) != 2 {
		t.Fatalf("%d incidents, want 2: %+v", len(incs), incs)
	}
	if got := len(incs[0].Nodes); got != 20 || incs[0].Cause != a || incs[0].ID != 1 {
		t.Errorf("incident 1 = %d nodes of %v (id %d), want 20 of /mnt/a", got, incs[0].Cause, incs[0].ID)
	}
	if got := incs[1].Nodes; !slices.Equal(got, []string{"n21", "n22"}) || incs[1].Cause != b {
		t.Errorf("incident 2 = %v of %v", got, incs[1].Cause)
	}
	opened := 0
	for _, ch := range changes {
		if ch.Kind == Opened {
			opened++
		}
	}
	if opened != 2 {
		t.Errorf("%d Opened changes, want 2: %+v", opened, changes)
	}
	if c := incs[0].Counts; c[0] != 20 {
		t.Errorf("counts %v, want 20 unkillable", c)
	}
	if e := incs[0].Example; e.Node != "n1" || e.PID != 101 {
		t.Errorf("example %+v, want n1's process", e)
	}
	if incs[0].Peak != 20 {
		t.Errorf("peak %d", incs[0].Peak)
	}
	// The same input again changes nothing.
	s2, ch := Group(s, all, t0.Add(time.Minute), Config{})
	if len(ch) != 0 || !reflect.DeepEqual(s2.Open, s.Open) {
		t.Errorf("a second call with the same nodes changed %+v", ch)
	}
}

// Nodes leave as they come back; the incident closes with its duration,
// and a later node of the same mount opens a new one with a new id.
func TestGroupLeaveCloseAndNewID(t *testing.T) {
	a := fs("/mnt/a")
	s, _ := Group(State{}, nodes("n", 1, 3, a), t0, Config{})
	s, ch := Group(s, nodes("n", 2, 3, a), t0.Add(time.Minute), Config{})
	if len(ch) != 1 || ch[0].Kind != Changed || !slices.Equal(ch[0].Left, []string{"n1"}) {
		t.Fatalf("changes %+v, want n1 left", ch)
	}
	s, ch = Group(s, nil, t0.Add(5*time.Minute), Config{})
	if len(ch) != 1 || ch[0].Kind != Closed || ch[0].Incident.Duration(t0.Add(time.Hour)) != 5*time.Minute {
		t.Fatalf("changes %+v, want closed after 5m", ch)
	}
	if len(s.Open) != 0 || len(s.Closed) != 1 || s.Closed[0].Peak != 3 {
		t.Fatalf("state %+v", s)
	}
	if inc, ok := s.Find(1); !ok || inc.Open() {
		t.Errorf("Find(1) = %+v %v, want the closed incident", inc, ok)
	}
	s, _ = Group(s, nodes("n", 1, 1, a), t0.Add(6*time.Minute), Config{})
	if incs := open(s); len(incs) != 1 || incs[0].ID != 2 {
		t.Errorf("reopened %+v, want a new incident 2", incs)
	}
}

// A wait channel groups within the window of the last join only.
func TestGroupWchanWindow(t *testing.T) {
	w := wchan("rpc_wait_bit_killable")
	cfg := Config{}
	s, _ := Group(State{}, nodes("n", 1, 1, w), t0, cfg)
	s, _ = Group(s, nodes("n", 1, 2, w), t0.Add(9*time.Minute), cfg)               // within 10m of n1's join
	s, _ = Group(s, nodes("n", 1, 3, w), t0.Add(9*time.Minute+9*time.Minute), cfg) // within 10m of n2's
	if incs := open(s); len(incs) != 1 || len(incs[0].Nodes) != 3 {
		t.Fatalf("incidents %+v, want one of 3", incs)
	}
	s, _ = Group(s, nodes("n", 1, 4, w), t0.Add(40*time.Minute), cfg)
	incs := open(s)
	if len(incs) != 2 || !slices.Equal(incs[1].Nodes, []string{"n4"}) {
		t.Fatalf("incidents %+v, want n4 alone in a new one", incs)
	}
	// A file system has no window.
	a := fs("/scratch")
	s, _ = Group(State{}, nodes("m", 1, 1, a), t0, cfg)
	s, _ = Group(s, nodes("m", 1, 2, a), t0.Add(24*time.Hour), cfg)
	if incs := open(s); len(incs) != 1 {
		t.Errorf("file system incidents %+v, want one", incs)
	}
}

// A node whose cause changes moves; one whose cause vanishes (the agent
// lost its report) stays in its diagnosed incident; one without a cause is
// in none.
func TestGroupCauseChanges(t *testing.T) {
	a, b := fs("/mnt/a"), fs("/mnt/b")
	s, _ := Group(State{}, nodes("n", 1, 2, a), t0, Config{})
	down := nodes("n", 1, 2, a)
	down[0].Cause = Cause{Kind: KindUndiagnosed}
	down[1].Cause = b
	down = append(down, Node{Name: "n9"}) // an administrator's drain
	s, _ = Group(s, down, t0.Add(time.Second), Config{})
	if id := s.Member["n1"]; s.Open[id].Cause != a {
		t.Errorf("n1 moved to %v, want it kept in /mnt/a's", s.Open[id].Cause)
	}
	if id := s.Member["n2"]; s.Open[id].Cause != b {
		t.Errorf("n2 in %v, want /mnt/b's", s.Open[id].Cause)
	}
	if _, in := s.Member["n9"]; in {
		t.Error("a node without a cause is in an incident")
	}
}

// Group never modifies the State it is given.
func TestGroupIsPure(t *testing.T) {
	s1, _ := Group(State{}, nodes("n", 1, 3, fs("/a")), t0, Config{})
	snapshot := fmt.Sprintf("%+v", s1)
	s2a, ch1 := Group(s1, nodes("n", 2, 5, fs("/b")), t0.Add(time.Second), Config{})
	s2b, ch2 := Group(s1, nodes("n", 2, 5, fs("/b")), t0.Add(time.Second), Config{})
	if fmt.Sprintf("%+v", s1) != snapshot {
		t.Error("Group modified its argument")
	}
	if !reflect.DeepEqual(s2a, s2b) || !reflect.DeepEqual(ch1, ch2) {
		t.Error("the same arguments gave different results")
	}
	// The order of down does not matter.
	rev := nodes("n", 2, 5, fs("/b"))
	slices.Reverse(rev)
	s2c, _ := Group(s1, rev, t0.Add(time.Second), Config{})
	if !reflect.DeepEqual(s2a, s2c) {
		t.Error("the order of the nodes changed the result")
	}
}

// Past MaxOpen incidents, new causes share the overflow incident; the
// closed ones kept are bounded.
func TestGroupBounds(t *testing.T) {
	var down []Node
	for i := range MaxOpen + 10 {
		down = append(down, Node{Name: fmt.Sprintf("n%d", i), Cause: fs(fmt.Sprintf("/m%d", i))})
	}
	s, _ := Group(State{}, down, t0, Config{})
	if len(s.Open) != MaxOpen+1 {
		t.Fatalf("%d open incidents, want %d and the overflow", len(s.Open), MaxOpen)
	}
	over := 0
	for _, inc := range s.Open {
		if inc.Cause.Kind == KindOverflow {
			over = len(inc.Nodes)
			if !strings.Contains(inc.Cause.String(), "256") {
				t.Errorf("overflow cause %q", inc.Cause)
			}
		}
	}
	if over != 10 {
		t.Errorf("overflow holds %d nodes, want 10", over)
	}
	s, _ = Group(s, nil, t0.Add(time.Second), Config{})
	if len(s.Open) != 0 || len(s.Closed) != MaxClosed {
		t.Errorf("%d open, %d closed kept, want 0 and %d", len(s.Open), len(s.Closed), MaxClosed)
	}
}

func TestClean(t *testing.T) {
	down := nodes("n", 1, 3, fs("/a"))
	down[1].Clean = true
	s, _ := Group(State{}, down, t0, Config{})
	if inc := open(s)[0]; !slices.Equal(inc.Clean, []string{"n2"}) {
		t.Errorf("clean %v", inc.Clean)
	}
}

func TestCauseWords(t *testing.T) {
	lustre := Cause{Kind: KindFilesystem, FSType: "lustre", Source: "mds1@o2ib:/scratch", Mountpoint: "/scratch"}
	for _, tc := range []struct {
		c           Cause
		long, short string
	}{
		{lustre, "lustre mds1@o2ib:/scratch on /scratch", "lustre /scratch"},
		{wchan("request_wait_answer"), "wait channel request_wait_answer", "wchan request_wait_answer"},
		{Cause{Kind: KindNoReport}, "no report by the teardown deadline", "no report"},
	} {
		if tc.c.String() != tc.long || tc.c.Short() != tc.short {
			t.Errorf("%+v: %q / %q", tc.c, tc.c.String(), tc.c.Short())
		}
	}
}

func TestLimitAndBudget(t *testing.T) {
	l := Limit{Fraction: 0.1, Window: 10 * time.Minute}
	for known, want := range map[int]int{0: 1, 5: 1, 30: 3, 1000: 100} {
		if got := l.Of(known); got != want {
			t.Errorf("Of(%d) = %d, want %d", known, got, want)
		}
	}
	if got := (Limit{Nodes: 5, Fraction: 0.1}).Of(30); got != 5 {
		t.Errorf("the floor: %d, want 5", got)
	}
	if (Limit{}).Enabled() {
		t.Error("the zero limit is enabled")
	}
	var b Budget
	b.Take("n1", t0)
	b.Take("n2", t0.Add(time.Minute))
	if b.Used(t0.Add(2*time.Minute), l.Window) != 2 || !b.NextFree(l.Window).Equal(t0.Add(10*time.Minute)) {
		t.Fatal("two slots, the first free at 10m")
	}
	b.Release("n2")
	if b.Used(t0.Add(10*time.Minute), l.Window) != 0 {
		t.Error("n1's slot outlived its window")
	}
}

func TestConfigValidate(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate("incidents"); err != nil {
		t.Fatal(err)
	}
	if c.ResumeMin() != 3 {
		t.Errorf("default auto_resume_min_nodes %d, want 3", c.ResumeMin())
	}
	c.LimitFraction, c.LimitNodes = 1.5, -1
	err := c.Validate("incidents")
	if err == nil || !strings.Contains(err.Error(), `"incidents.drain_limit_fraction"`) || !strings.Contains(err.Error(), `"incidents.drain_limit_nodes"`) {
		t.Errorf("err = %v", err)
	}
	// auto_resume_min_nodes: never below what one liar and the node
	// resumed make, never past what Gone keeps.
	for n, ok := range map[int]bool{0: true, 1: false, 2: false, 3: true, 5: true, MaxGone: true, MaxGone + 1: false, -1: false} {
		c := DefaultConfig()
		c.AutoResumeMinNodes = n
		err := c.Validate("incidents")
		if (err == nil) != ok || (!ok && !strings.Contains(err.Error(), `"incidents.auto_resume_min_nodes"`)) {
			t.Errorf("auto_resume_min_nodes %d: %v", n, err)
		}
		if ok && c.ResumeMin() != max(n, 3) {
			t.Errorf("auto_resume_min_nodes %d: ResumeMin %d", n, c.ResumeMin())
		}
	}
	if (Config{AutoResumeMinNodes: 2}).ResumeMin() != 3 || (Config{AutoResumeMinNodes: 1000}).ResumeMin() != MaxGone {
		t.Error("ResumeMin does not bound an unvalidated value")
	}
}

// clean returns ns with every node verified clean.
func clean(ns []Node) []Node {
	out := slices.Clone(ns)
	for i := range out {
		out[i].Clean = true
	}
	return out
}

// resumable lists the nodes of s that Resumable lets resume with min.
func resumable(s State, min int) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(s.Member)) {
		if s.Resumable(name, min) {
			out = append(out, name)
		}
	}
	return out
}

// Issue 26, item A, in the pure part: one node's word (the liar, "x1",
// down for any cause it likes, clean or not, flipping at will) never makes
// another node resumable; three honest nodes are; and the nodes counted
// are those that hung with the node and cleared since.
func TestResumableNeedsTwoOtherNodes(t *testing.T) {
	w := wchan("request_wait_answer")
	victim := clean(nodes("n", 1, 1, w))
	liar := nodes("x", 1, 1, w)
	step := func(s State, down ...[]Node) State {
		s, _ = Group(s, slices.Concat(down...), t0, Config{})
		return s
	}

	t.Run("the victim and one liar", func(t *testing.T) {
		s := step(State{}, victim)
		if got := resumable(s, 0); got != nil {
			t.Fatalf("alone: %v resumable", got)
		}
		for i, down := range [][][]Node{
			{victim, liar},        // the liar joins
			{victim, clean(liar)}, // says it is clean
			{victim},              // comes back
			{victim, clean(liar)}, // down and clean again
			{victim},              // back again
		} {
			s = step(s, down...)
			if got := resumable(s, 0); got != nil {
				t.Fatalf("step %d: %v resumable, want none", i, got)
			}
		}
		if inc := s.Open[s.Member["n1"]]; len(inc.Gone) != 1 || inc.Gone[0].Node != "x1" {
			t.Errorf("gone %+v, want the liar once however often it left", inc.Gone)
		}
	})

	t.Run("three honest nodes", func(t *testing.T) {
		s := step(State{}, nodes("n", 1, 3, w))
		s = step(s, clean(nodes("n", 1, 2, w)), nodes("n", 3, 3, w))
		if got := resumable(s, 0); got != nil {
			t.Fatalf("two of three clean: %v resumable, want none (each has one other)", got)
		}
		s = step(s, clean(nodes("n", 1, 3, w)))
		if got := resumable(s, 0); !slices.Equal(got, []string{"n1", "n2", "n3"}) {
			t.Fatalf("three clean: %v resumable, want n[1-3]", got)
		}
		// n1 and n2 are resumed (they leave: gone); n3 still is.
		s = step(s, clean(nodes("n", 3, 3, w)))
		if got := resumable(s, 0); !slices.Equal(got, []string{"n3"}) {
			t.Fatalf("the last one: %v resumable, want n3", got)
		}
		if got := resumable(s, 4); got != nil {
			t.Errorf("min 4: %v resumable", got)
		}
		if got := resumable(s, 1); !slices.Equal(got, []string{"n3"}) {
			t.Errorf("min 1 (raised to 3): %v", got)
		}
	})

	t.Run("the cause still hangs the others", func(t *testing.T) {
		a := fs("/mnt/a")
		honest := nodes("n", 1, 3, a)
		liarA := nodes("x", 1, 1, a)
		s := step(State{}, honest, liarA)
		s = step(s, clean(honest[:1]), honest[1:], clean(liarA))
		if got := resumable(s, 0); got != nil {
			t.Fatalf("n1 and the liar clean, n2 and n3 hung: %v resumable", got)
		}
		s = step(s, clean(honest[:1]), honest[1:]) // the liar comes back
		if got := resumable(s, 0); got != nil {
			t.Fatalf("n1 clean, the liar back, n2 and n3 hung: %v resumable", got)
		}
		s = step(s, clean(honest[:2]), honest[2:])
		if got := resumable(s, 0); !slices.Equal(got, []string{"n1", "n2"}) {
			t.Fatalf("n1 and n2 clean, the liar back: %v resumable, want n1 and n2", got)
		}
	})

	t.Run("a storm long over vouches for no later node", func(t *testing.T) {
		// Five nodes hung on /mnt/a and came back; the liar stayed down
		// for it all along, so the incident stayed open with its peak.
		a := fs("/mnt/a")
		liarA := nodes("x", 1, 1, a)
		s := step(State{}, nodes("n", 2, 6, a), liarA)
		s = step(s, clean(nodes("n", 2, 6, a)), clean(liarA))
		s = step(s, clean(liarA))
		// n1 hangs on /mnt/a alone, later, and is clean.
		s = step(s, clean(liarA), clean(nodes("n", 1, 1, a)))
		inc := s.Open[s.Member["n1"]]
		if inc.Peak != 6 || len(inc.Gone) != 5 {
			t.Fatalf("incident %+v, want peak 6 and 5 gone", inc)
		}
		if s.Resumable("n1", 0) {
			t.Fatal("n1 resumable on the storm before it")
		}
		// n7 hangs with it and clears: now one honest node besides the liar.
		s = step(s, clean(liarA), clean(nodes("n", 1, 1, a)), nodes("n", 7, 7, a))
		s = step(s, clean(liarA), clean(nodes("n", 1, 1, a)))
		if !s.Resumable("n1", 0) {
			t.Error("n1 not resumable once n7 hung with it and cleared")
		}
	})

	t.Run("a node whose state is unknown has not cleared", func(t *testing.T) {
		s := step(State{}, nodes("n", 1, 3, w))
		s = step(s, clean(nodes("n", 1, 1, w)), []Node{{Name: "n2", Unreachable: true}}, clean(nodes("n", 3, 3, w)))
		if inc := s.Open[s.Member["n1"]]; len(inc.Gone) != 0 || s.Resumable("n1", 0) {
			t.Fatalf("n2 unreachable counted as cleared: gone %+v", inc.Gone)
		}
		// Down for another diagnosed cause: its cause here cleared. Down
		// without a diagnosis: it stays (rule 2), not cleared.
		s = step(State{}, nodes("n", 1, 4, w))
		moved := nodes("n", 2, 2, fs("/mnt/b"))
		undiagnosed := []Node{{Name: "n3", Cause: Cause{Kind: KindUndiagnosed}}}
		s = step(s, clean(nodes("n", 1, 1, w)), moved, undiagnosed, nodes("n", 4, 4, w))
		inc := s.Open[s.Member["n1"]]
		if len(inc.Gone) != 1 || inc.Gone[0].Node != "n2" || !slices.Contains(inc.Nodes, "n3") {
			t.Errorf("gone %+v, nodes %v: want n2 gone, n3 still in", inc.Gone, inc.Nodes)
		}
	})
}

// Gone keeps the latest MaxGone departures, never a member, and a
// windowless incident's departures are kept only while it is open.
func TestGoneBounded(t *testing.T) {
	a := fs("/mnt/a")
	all := nodes("n", 1, MaxGone+20, a)
	s, _ := Group(State{}, all, t0, Config{})
	for i := 1; i < len(all); i++ {
		s, _ = Group(s, all[i:], t0, Config{}) // one node back at a time
	}
	inc := s.Open[s.Member[all[len(all)-1].Name]]
	if len(inc.Gone) != MaxGone || inc.Gone[0].Node != all[len(all)-1-MaxGone].Name || inc.Gone[MaxGone-1].Node != all[len(all)-2].Name {
		t.Fatalf("gone: %d, from %v to %v; want the latest %d", len(inc.Gone), inc.Gone[0], inc.Gone[len(inc.Gone)-1], MaxGone)
	}
	// Some come back down: they leave Gone.
	s, _ = Group(s, slices.Concat(all[len(all)-3:], all[30:32]), t0, Config{})
	inc = s.Open[s.Member[all[len(all)-1].Name]]
	for _, d := range inc.Gone {
		if slices.Contains(inc.Nodes, d.Node) {
			t.Errorf("%s is gone and a member", d.Node)
		}
	}
	s, _ = Group(s, nil, t0, Config{})
	if len(s.Closed) != 1 || s.Closed[0].Gone != nil || len(s.Since) != 0 {
		t.Errorf("closed %+v, since %v: want no departures and no member kept", s.Closed, s.Since)
	}
}
