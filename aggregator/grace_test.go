package aggregator

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/history"
	"github.com/gracewatch/gracewatch/aggregator/httpapi"
	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// histService is a Service over a history directory, its HTTP server and
// a stop that ends it (a real restart: a new one over the same directory).
type histService struct {
	*harness
	base string
	stop func()
}

func startHistService(t *testing.T, clk *clock.Fake, dir string, opts ...func(*Options)) *histService {
	t.Helper()
	o := Options{Name: "agg-1", Policy: defaultPolicy, Grace: 120 * time.Second, Clock: clk,
		Logger: testLogger(t), TeardownHistory: history.Options{Dir: dir}}
	for _, f := range opts {
		f(&o)
	}
	h, stopService := startHarness(t, clk, o)
	srv := httpapi.NewServer(edge{h.svc}, httpapi.ServerOptions{Clock: clk, Logger: testLogger(t)})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		sctx, scancel := context.WithTimeout(context.Background(), testTimeout)
		defer scancel()
		if err := srv.Shutdown(sctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		<-served
		stopService()
	}
	t.Cleanup(stop)
	return &histService{harness: h, base: "http://" + l.Addr().String(), stop: stop}
}

// td is a teardown as an agent sends it, released at start+dur (dur < 0:
// still running).
func td(job string, start time.Time, dur time.Duration, outcome, user, cmd string) *gwpb.Teardown {
	t := &gwpb.Teardown{Job: job, EndedMs: ms(start), DeadlineMs: ms(start.Add(120 * time.Second)), GraceMs: 120000,
		User: user, Command: cmd}
	if dur < 0 {
		t.Phase = "teardown"
		return t
	}
	t.Phase, t.Outcome, t.ReleasedMs = "released", outcome, ms(start.Add(dur))
	return t
}

// graceHistory is the recorded history of TestGraceAdvisor: per node, the
// updates its agent sends (each with its teardowns, as an agent resends
// its recent releases in every update).
func graceHistory(now time.Time) map[string][]*gwpb.StateUpdate {
	base := now.Add(-24 * time.Hour)
	ups := map[string][]*gwpb.StateUpdate{}
	send := func(node string, floor int64, path string, cause *gwpb.Cause, tds ...*gwpb.Teardown) {
		seq := uint64(len(ups[node]) + 1)
		ups[node] = append(ups[node], &gwpb.StateUpdate{Meta: upMeta(1, seq), Teardowns: tds, KillPathFloorMs: floor, KillPath: path, Cause: cause})
	}
	// The generated part: 1,200 clean teardowns on 40 nodes, durations
	// 1..60 s, each 20 times; node k gets i ≡ k (mod 40).
	gen := map[string][]*gwpb.Teardown{}
	for i := range 1200 {
		node := fmt.Sprintf("gen%02d", i%40)
		gen[node] = append(gen[node], td(fmt.Sprint(10000+i), base.Add(time.Duration(i)*time.Minute), time.Duration(i%60+1)*time.Second, "clean", "gen", "epilog"))
	}
	for node, tds := range gen {
		send(node, 0, "", nil, tds...)
	}
	// The hand-made part.
	send("n1", 95000, "slurm: KillWait 30s + UnkillableStepTimeout 65s", nil,
		td("1", base.Add(time.Hour), 10*time.Second, "clean", "alice", "epilog"),
		td("2", base.Add(2*time.Hour), 50*time.Second, "clean", "alice", "epilog"))
	send("n2", 70000, "flux: kill-timeout 70s", nil,
		td("3", base.Add(3*time.Hour), 90*time.Second, "exited", "bob", "sync"),
		td("4", base.Add(4*time.Hour), 200*time.Second, "terminated", "bob", "lfs"))
	send("n3", 0, "", &gwpb.Cause{Fstype: "fuse.hangfs", Mountpoint: "/scratch", Class: "unkillable", Job: "5"},
		td("5", base.Add(5*time.Hour), -1, "", "carol", "cat"))
	send("n3", 0, "", &gwpb.Cause{Fstype: "fuse.hangfs", Mountpoint: "/scratch", Class: "unkillable", Job: "5"},
		td("5", base.Add(5*time.Hour), 400*time.Second, "hung", "carol", "cat"))
	// A hostile user name: recorded as unknown.
	send("n4", 0, "", nil, td("6", base.Add(6*time.Hour), 30*time.Second, "clean", "x;rm -rf /", "epilog"))
	// Clocks that step: released before its start, released 2 h ahead.
	send("n5", 0, "", nil,
		&gwpb.Teardown{Job: "7", Phase: "released", DeadlineMs: ms(base.Add(7 * time.Hour)), GraceMs: 120000, Outcome: "clean", ReleasedMs: ms(base.Add(7*time.Hour - 3*time.Minute))},
		&gwpb.Teardown{Job: "8", Phase: "released", DeadlineMs: ms(now), GraceMs: 120000, Outcome: "clean", ReleasedMs: ms(now.Add(2 * time.Hour))})
	// Still running, 300 s at the question (started 300 s before now).
	send("n6", 0, "", nil, td("99", now.Add(-300*time.Second), -1, "", "dave", "dd"))
	return ups
}

func deliverHistory(h *harness, ups map[string][]*gwpb.StateUpdate) {
	for node, us := range ups {
		for _, u := range us {
			h.update(node, u)
		}
	}
}

func askGrace(t *testing.T, base, query string) (response, api.GraceAdvice) {
	t.Helper()
	r := call(t, "GET", base+"/v1/grace?"+query, "", "")
	var ga api.GraceAdvice
	if r.status == 200 {
		if err := json.Unmarshal(r.body, &ga); err != nil {
			t.Fatal(err)
		}
	}
	return r, ga
}

// wantGraceTable is the hand-computed answer to graceQuery over
// graceHistory (docs of the arithmetic in the test's comments).
func checkGraceTable(t *testing.T, ga api.GraceAdvice) {
	t.Helper()
	if ga.Records != 1206 || ga.Running != 1 || ga.NodesSeen != 45 {
		t.Errorf("records %d running %d nodes %d, want 1206, 1, 45 (40 gen, n1-n4, n6; n5 sent only refused ones)", ga.Records, ga.Running, ga.NodesSeen)
	}
	// Nearest rank of 1,206: p50 the 603rd (600 gen ≤ 30 s and 10, 30:
	// 602 ≤ 30 s, so 31 s), p99 the 1194th (60 s), p99.9 the 1205th
	// (1,203 ≤ 60 s, then 90, 200), max 200: no duration counts past the
	// second-longest node's own longest (n2's 200 s; n3's 400 s is one
	// node's). The median node holds 30 (the gen ones): none over 60.
	wantD := api.GraceDistribution{Count: 1206, P50: 31, P99: 60, P999: 200, Max: 200, NodeCap: 60, Capped: []api.GraceNodeCount{}, Bound: 200,
		Above: []api.GraceEvidence{{Node: "n3", Job: "5", User: "carol", Command: "cat", Cause: "fuse.hangfs /scratch", Duration: 400, Outcome: "hung"}}}
	if !reflect.DeepEqual(ga.Durations, wantD) {
		t.Errorf("durations %+v, want %+v", ga.Durations, wantD)
	}
	// Per G (s): overdue = released longer + the running one (300 s);
	// nodes: every gen node's longest is 41..60 s; planned wrong =
	// Σ(d − G); false drains: clean or exited ones longer; unknown: the
	// terminated (200 s) and hung (400 s) ones no longer than G.
	want := []api.GraceCandidate{
		{G: 10, Overdue: 1006, Nodes: 45, PlannedWrong: 25500 + 720 + 290, FalseDrains: 1003},
		{G: 30, Overdue: 605, Nodes: 44, PlannedWrong: 9300 + 620 + 270, FalseDrains: 602},
		{G: 60, Overdue: 4, Nodes: 3, PlannedWrong: 510 + 240, FalseDrains: 1},
		{G: 100, Overdue: 3, Nodes: 3, PlannedWrong: 400 + 200},
		{G: 120, InForce: true, Overdue: 3, Nodes: 3, PlannedWrong: 360 + 180},
		{G: 300, Overdue: 1, Nodes: 1, PlannedWrong: 100, Unknown: 1},
	}
	if !reflect.DeepEqual(ga.Candidates, want) {
		t.Errorf("candidates\n got %+v\nwant %+v", ga.Candidates, want)
	}
	// The floor two nodes report: n2's 70 s (n1's 95 s is one node's).
	wantF := &api.GraceFloor{Seconds: 70, Node: "n2", Path: "flux: kill-timeout 70s", Backing: 2, Nodes: []string{"n1", "n2"},
		Above: []api.GraceNodeFloor{{Node: "n1", Seconds: 95, Path: "slurm: KillWait 30s + UnkillableStepTimeout 65s"}}}
	if !reflect.DeepEqual(ga.KillPathFloor, wantF) {
		t.Errorf("floor %+v, want %+v", ga.KillPathFloor, wantF)
	}
	r := ga.Recommendation
	if r == nil {
		t.Fatalf("no recommendation: %s", ga.Thin)
	}
	// The nodes' own longest self-ended: n2 90 s (exited), gen19 and
	// gen39 60 s (by name), the other gen ones 41 to 59 s, n1 50 s, n4
	// 30 s. G = max(floor 70, the second node's 60) = 70, driven by the
	// floor: it catches the hung one (400) and the running one (300),
	// misses none, drains the terminated one (200) without knowing, and
	// n2's 90 s one, which no other node reached, for nothing.
	if r.G != 70 || r.Driver != "floor" || r.Caught != 2 || r.Missed != 0 || r.Signalled != 1 || r.Unreported != 0 || r.FalseDrains != 1 {
		t.Errorf("recommendation %+v", r)
	}
	if e := r.LongestSelfEnded; e == nil || *e != (api.GraceEvidence{Node: "gen19", Job: "10059", User: "gen", Command: "epilog", Duration: 60, Outcome: "clean"}) {
		t.Errorf("longest self-ended %+v", e)
	}
	if r.Backing != 3 || !reflect.DeepEqual(r.Nodes, []string{"n2", "gen19", "gen39"}) ||
		!reflect.DeepEqual(r.Unbacked, []api.GraceEvidence{{Node: "n2", Job: "3", User: "bob", Command: "sync", Duration: 90, Outcome: "exited"}}) {
		t.Errorf("backed by %d nodes %v, not followed %+v", r.Backing, r.Nodes, r.Unbacked)
	}
	wantCaught := []api.GraceEvidence{
		{Node: "n3", Job: "5", User: "carol", Command: "cat", Cause: "fuse.hangfs /scratch", Duration: 400, Outcome: "hung"},
		{Node: "n6", Job: "99", User: "dave", Command: "dd", Duration: 300, Outcome: "running"},
	}
	if !reflect.DeepEqual(r.CaughtExamples, wantCaught) {
		t.Errorf("caught %+v", r.CaughtExamples)
	}
	// Over 70 s: carol (400, hung), dave (running 300: long and hung),
	// bob (200, terminated; 90, exited).
	if want := []api.GraceTop{{Name: "carol", Long: 1, Hung: 1}, {Name: "dave", Long: 1, Hung: 1}, {Name: "bob", Long: 2}}; ga.TopG != 70 || !reflect.DeepEqual(ga.TopUsers, want) {
		t.Errorf("top users over %v: %+v", ga.TopG, ga.TopUsers)
	}
	if want := []api.GraceTop{{Name: "cat", Long: 1, Hung: 1}, {Name: "dd", Long: 1, Hung: 1}, {Name: "lfs", Long: 1}, {Name: "sync", Long: 1}}; !reflect.DeepEqual(ga.TopCommands, want) {
		t.Errorf("top commands: %+v", ga.TopCommands)
	}
	if ga.Outcomes["clean"] != 1203 || ga.Outcomes["exited"] != 1 || ga.Outcomes["terminated"] != 1 || ga.Outcomes["hung"] != 1 {
		t.Errorf("outcomes %v", ga.Outcomes)
	}
}

const graceQuery = "g=10s,30,1m,100s,300s"

// TestGraceAdvisor is issue 17's test 2: a recorded history with known
// durations, fed through the intake as agents send it, gives the
// hand-computed table; the same after a real restart of the Service over
// the same directory, with every update sent again (deduplicated).
func TestGraceAdvisor(t *testing.T) {
	dir := t.TempDir()
	now := t0.Add(48 * time.Hour)
	clk := clock.NewFake(now.Add(-300 * time.Second))
	a := startHistService(t, clk, dir)
	ups := graceHistory(now)
	deliverHistory(a.harness, ups)
	a.advance(300 * time.Second) // the running one has run 300 s
	_, ga := askGrace(t, a.base, graceQuery)
	checkGraceTable(t, ga)
	st := a.svc.HistoryStats()
	if st.Records != 1206 || st.Refused[history.RefusedClock] != 1 || st.Refused[history.RefusedFuture] != 1 || st.UsersDropped != 1 {
		t.Errorf("stats %+v", st)
	}
	// A node set: two nodes hold too little to recommend from.
	_, thin := askGrace(t, a.base, "nodes=n[3-4]")
	if thin.Records != 2 || thin.Recommendation != nil || thin.Thin == "" {
		t.Errorf("n[3-4]: %d records, thin %q, recommendation %+v", thin.Records, thin.Thin, thin.Recommendation)
	}
	// A window with no data.
	_, empty := askGrace(t, a.base, "from=2020-01-01T00:00:00Z&to=2020-01-02T00:00:00Z")
	if empty.Records != 0 || empty.Thin == "" || empty.Durations.Count != 0 {
		t.Errorf("empty window: %+v", empty)
	}

	a.stop()
	b := startHistService(t, clk, dir)
	deliverHistory(b.harness, ups) // every agent resends: nothing is stored twice
	_, gb := askGrace(t, b.base, graceQuery)
	checkGraceTable(t, gb)
	if st := b.svc.HistoryStats(); st.Records != 1206 || st.Refused[history.RefusedDuplicate] < 1206 {
		t.Errorf("after the restart: %+v", st)
	}
}

func TestGraceBadQueries(t *testing.T) {
	clk := clock.NewFake(t0)
	s := startHistService(t, clk, t.TempDir())
	for _, q := range []string{"bogus=1", "g=0s", "g=1ms", "g=1000h", "g=abc", "top=0", "top=51", "from=yesterday",
		"from=2025-06-02T00:00:00Z&to=2025-06-01T00:00:00Z", "nodes=n[", "g=1s&g=2s", "top_g=-5s"} {
		r, _ := askGrace(t, s.base, q)
		if r.status != 400 {
			t.Errorf("%s: status %d, want 400", q, r.status)
		} else {
			t.Logf("%s: %s", q, r.errorMsg(t))
		}
	}
}

func TestGraceHistoryOff(t *testing.T) {
	h := newHarness(t)
	base := h.serve(httpapi.ServerOptions{})
	if r := call(t, "GET", base+"/v1/grace", "", ""); r.status != 503 {
		t.Errorf("status %d: %s", r.status, r.body)
	}
}

func TestHistoryConfigDefaults(t *testing.T) {
	cfg := DefaultConfig()
	o := cfg.History.Options("/var/lib/x")
	if o.Dir != filepath.Join("/var/lib/x", "history") || o.MaxBytes != history.DefaultMaxBytes || o.MaxAge != history.DefaultMaxAge {
		t.Errorf("%+v", o)
	}
	if o := cfg.History.Options(""); o.Dir != "" {
		t.Errorf("no state dir: %+v", o)
	}
	_, err := ParseConfig("x.toml", []byte("[history]\nmax_bytes = 10\n"))
	if err == nil {
		t.Error("max_bytes = 10 accepted")
	}
	_ = os.Getpid
}
