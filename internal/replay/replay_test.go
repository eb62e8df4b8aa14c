package replay

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/swf"
)

func TestWindowAndMap(t *testing.T) {
	trace := []swf.Job{
		{Line: 1, ID: 1, Submit: 600, Run: 99, Procs: 88, ReqTime: 3600},
		{Line: 2, ID: 2, Submit: 0, Run: 30, Procs: 30, ReqTime: 90},
		{Line: 3, ID: 3, Submit: 600, Run: 9000, Procs: 72 * 30, ReqTime: 7200},
		{Line: 4, ID: 4, Submit: 1200, Run: -1, Procs: 4, ReqTime: 60},
		{Line: 5, ID: 5, Submit: 1800, Run: 120, Procs: -1, ReqProcs: 1, ReqTime: -1},
	}
	w, err := Window(trace, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	if w[0].ID != 1 || w[1].ID != 3 || w[2].ID != 4 {
		t.Fatalf("window %+v: want jobs 1, 3, 4, 5 (submit order, ties in file order)", w)
	}
	jobs, d, err := Map(w, Mapping{Nodes: 4, ProcsPerNode: 72, Compression: 60})
	if err != nil {
		t.Fatal(err)
	}
	want := []Job{
		{TraceID: 1, Line: 1, Submit: 0, Nodes: 2, LimitMinutes: 1, Run: 1650 * time.Millisecond},
		{TraceID: 3, Line: 3, Submit: 0, Nodes: 4, LimitMinutes: 2, Run: 2 * time.Minute},
		{TraceID: 5, Line: 5, Submit: 20 * time.Second, Nodes: 1, LimitMinutes: 1, Run: 2 * time.Second},
	}
	if len(jobs) != len(want) {
		t.Fatalf("%+v, want %+v", jobs, want)
	}
	for i := range want {
		if jobs[i] != want[i] {
			t.Errorf("job %d: %+v, want %+v", i, jobs[i], want[i])
		}
	}
	wantD := Distortion{Jobs: 3, Skipped: 1, LimitRaised: 1, RunCapped: 1, NodesCapped: 1, NoLimit: 1}
	ratio := d.LimitRatio
	d.LimitRatio = 0
	if d != wantD {
		t.Errorf("distortion %+v, want %+v", d, wantD)
	}
	// A longest run of 100 trace seconds trims job 3 (9000 s) and job 5
	// (120 s), not job 1 (99 s); limits stay as requested.
	trimmed, dt, err := Map(w, Mapping{Nodes: 4, ProcsPerNode: 72, Compression: 60, MaxRun: 100 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if dt.RunTrimmed != 2 || dt.RunCapped != 0 || trimmed[0] != jobs[0] || trimmed[1].Run != 100*time.Second/60 ||
		trimmed[1].LimitMinutes != 2 || trimmed[2].Run != 100*time.Second/60 {
		t.Errorf("trimmed at 100 s: %+v, %+v", trimmed, dt)
	}
	if _, _, err := Map(w, Mapping{Nodes: 4, ProcsPerNode: 72, Compression: 60, MaxRun: -time.Second}); err == nil {
		t.Error("a negative longest run was accepted")
	}
	// 3600/60 = 60 s: 1 minute exactly; 7200/60: 2; 120/60 = 2 s: 1 minute.
	if want := (1 + 1 + 30.0) / 3; ratio < want-1e-9 || ratio > want+1e-9 {
		t.Errorf("limit ratio %g, want %g", ratio, want)
	}
	for _, tt := range []struct {
		start, count int
		m            Mapping
	}{{-1, 1, Mapping{Nodes: 1, ProcsPerNode: 1, Compression: 1}}, {0, 6, Mapping{Nodes: 1, ProcsPerNode: 1, Compression: 1}},
		{0, 1, Mapping{Nodes: 0, ProcsPerNode: 72, Compression: 1}}, {0, 1, Mapping{Nodes: 1, ProcsPerNode: 72, Compression: 0.5}}} {
		w, err := Window(trace, tt.start, tt.count)
		if err == nil {
			_, _, err = Map(w, tt.m)
		}
		if err == nil {
			t.Errorf("window %d+%d, %+v: no error", tt.start, tt.count, tt.m)
		}
	}
}

func TestModel(t *testing.T) {
	m := Model{Seed: 7, HungRate: 0.01, SlowRate: 0.1, FastMax: time.Second, SlowMin: 2 * time.Second, SlowMax: 5 * time.Second}
	if err := m.Validate(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := m.Validate(5 * time.Second); err == nil {
		t.Error("a slow teardown of 5 s accepted with G = 5 s")
	}
	if err := (Model{HungRate: 0.6, SlowRate: 0.5}).Validate(time.Minute); err == nil {
		t.Error("rates summing above 1 accepted")
	}
	const n = 20000
	count := map[Kind]int{}
	more := m
	more.HungRate = 0.05
	for i := range n {
		td := m.Teardown(int64(i/2), i%2)
		if td != m.Teardown(int64(i/2), i%2) {
			t.Fatalf("job %d rank %d: two draws differ", i/2, i%2)
		}
		count[td.Kind]++
		switch td.Kind {
		case Fast:
			if td.Duration < 0 || td.Duration > m.FastMax {
				t.Fatalf("fast %v", td.Duration)
			}
		case Slow:
			if td.Duration < m.SlowMin || td.Duration > m.SlowMax {
				t.Fatalf("slow %v", td.Duration)
			}
		}
		if td.Kind == Hung && more.Teardown(int64(i/2), i%2).Kind != Hung {
			t.Fatalf("job %d rank %d hung at 1 %% but not at 5 %%", i/2, i%2)
		}
	}
	// Binomial: 200 ± 3σ (σ ≈ 14) hung, 2000 ± 3σ (σ ≈ 42) slow.
	if h, s := count[Hung], count[Slow]; h < 158 || h > 242 || s < 1870 || s > 2130 {
		t.Errorf("%d hung, %d slow of %d: want about 200 and 2000", h, s, n)
	}
	other := m
	other.Seed = 8
	same := 0
	for i := range 1000 {
		if other.Teardown(int64(i), 0) == m.Teardown(int64(i), 0) {
			same++
		}
	}
	if same > 900 {
		t.Errorf("seeds 7 and 8 draw %d of 1000 teardowns alike", same)
	}
}

func TestCompute(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	r := Record{
		Run: "drain", Begin: t0, End: at(100), Nodes: []string{"n1", "n2"}, Tau: time.Second,
		Jobs: []JobRecord{
			{ID: "1", Nodes: []string{"n1"}, Submit: at(0), Start: at(0), End: at(10)},
			{ID: "2", Nodes: []string{"n1"}, Submit: at(0), Start: at(12), End: at(20)},  // n1's teardown 10-11
			{ID: "3", Nodes: []string{"n2"}, Submit: at(0), Start: at(5), End: at(25)},   // n2's teardown hung 25-
			{ID: "4", Nodes: []string{"n2"}, Submit: at(20), Start: at(30), End: at(31)}, // on n2 while hung
			{ID: "5", Nodes: []string{"n1"}, Submit: at(90)},
		},
		Teardowns: []TeardownRecord{
			{Job: "1", Node: "n1", Kind: Fast, Start: at(10), End: at(11)},
			{Job: "2", Node: "n1", Kind: Slow, Start: at(20), End: at(26)},
			{Job: "3", Node: "n2", Kind: Hung, Start: at(25), D: at(35), Cleared: at(60)},
		},
		States: []StateInterval{
			{Node: "n1", State: "completing", From: at(20), To: at(26)},
			{Node: "n1", State: "planned", From: at(26), To: at(62)},
			{Node: "n2", State: "drained*", From: at(36), To: at(60)},
			{Node: "n2", State: "idle", From: at(60), To: at(100)}, // job 5 waits from 90
			{Node: "n1", State: "idle", From: at(2), To: at(25)},   // job 4 waits 20-30, job 3 0-5
		},
		Drains: []DrainRecord{
			{Node: "n2", Reason: "gracewatch: hung", At: at(38)},
			{Node: "n1", Reason: "gracewatch: slow", At: at(27)},
		},
		Commands: 9, Writes: 3,
	}
	f := Compute(r)
	if f.Jobs != 5 || f.Started != 4 {
		t.Errorf("jobs %d started %d, want 5, 4", f.Jobs, f.Started)
	}
	if want := (6 + 24) / 3600.0; f.TeardownNodeHours < want-1e-9 || f.TeardownNodeHours > want+1e-9 {
		t.Errorf("teardown node-hours %g, want %g", f.TeardownNodeHours, want)
	}
	// Waiting: 0-12 (jobs 2, 3), 20-30 (job 4), 90-100 (job 5): n1
	// planned 26-30, n2 idle 90-100, n1 idle 2-12 and 20-25.
	if want := (4 + 10 + 10 + 5) / 3600.0; f.HeldNodeHours < want-1e-9 || f.HeldNodeHours > want+1e-9 {
		t.Errorf("held node-hours %g, want %g", f.HeldNodeHours, want)
	}
	if f.OnTearingDown != 1 || f.FalseDrains != 1 || f.Drains != 2 || f.Hung != 1 || f.DrainedLate != 1 {
		t.Errorf("on tearing down %d, drains %d, false %d, hung %d, late %d: want 1, 2, 1, 1, 1\n%s",
			f.OnTearingDown, f.Drains, f.FalseDrains, f.Hung, f.DrainedLate, strings.Join(f.Violations, "\n"))
	}
	if f.DownAfterDP50 != 3*time.Second || f.Makespan != 31*time.Second {
		t.Errorf("down after D %v, makespan %v: want 3 s, 31 s", f.DownAfterDP50, f.Makespan)
	}
	// Waits 0, 12, 5, 10: mean 6.75 s, p95 12 s.
	if f.WaitMean != 6750*time.Millisecond || f.WaitP95 != 12*time.Second {
		t.Errorf("wait mean %v p95 %v, want 6.75 s, 12 s", f.WaitMean, f.WaitP95)
	}
	var csv bytes.Buffer
	s := Setup{Trace: "t", WindowLen: 5, Nodes: 2, Compression: 60, Grace: 10 * time.Second, Model: Model{HungRate: 0.01}}
	g := f
	g.Run = "drain+plan"
	g.LostNodeHours /= 2
	if err := WriteCSV(&csv, true, s, f, g); err != nil {
		t.Fatal(err)
	}
	s.Model.HungRate = 0.05
	if err := WriteCSV(&csv, false, s, f, g); err != nil {
		t.Fatal(err)
	}
	svg, err := Plot(&csv, "test")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(svg, "<path d=\"M") < 4 || !strings.Contains(svg, "drain+plan") || !strings.Contains(svg, "5 %") {
		t.Errorf("the plot lacks its lines or labels:\n%s", svg)
	}
	if tab := Table(f, g); !strings.Contains(tab, "| jobs started on a node tearing down | 1 | 1 |") {
		t.Errorf("table:\n%s", tab)
	}
}

// A row with several bad numbers is refused naming each, with its line.
func TestPlotNamesEveryBadColumn(t *testing.T) {
	_, err := Plot(strings.NewReader("run,hung_rate,lost_node_h,wait_mean_s\na,0.01,1,2\nb,x,2,Inf\n"), "t")
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`row 3: hung_rate "x"`, `row 3: wait_mean_s "Inf"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "lost_node_h") {
		t.Errorf("error %q names the good column lost_node_h", err)
	}
}

// FuzzPlot: the plot reads a file. It never panics, and refuses what it
// cannot draw.
func FuzzPlot(f *testing.F) {
	f.Add("run,hung_rate,lost_node_h,wait_mean_s\na,0.01,1,2\nb,0.05,2,3\n")
	f.Add("run,hung_rate,lost_node_h,wait_mean_s\na,0,1,2\n")
	f.Add("run,hung_rate,lost_node_h,wait_mean_s\na,NaN,1,2\n")
	f.Fuzz(func(t *testing.T, in string) {
		svg, err := Plot(strings.NewReader(in), "<t>")
		if err == nil && !strings.HasSuffix(svg, "</svg>\n") {
			t.Fatalf("no error and no SVG")
		}
	})
}
