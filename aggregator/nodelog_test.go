package aggregator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/meshfake"
	"github.com/gracewatch/gracewatch/aggregator/nodelog"
	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// logLine is one JSON line of the Service's log.
type logLine map[string]any

func parseLog(t testing.TB, text string) []logLine {
	t.Helper()
	var out []logLine
	for _, s := range strings.Split(strings.TrimSpace(text), "\n") {
		if s == "" {
			continue
		}
		var l logLine
		if err := json.Unmarshal([]byte(s), &l); err != nil {
			t.Fatalf("log line %q: %v", s, err)
		}
		out = append(out, l)
	}
	return out
}

func (l logLine) str(key string) string { s, _ := l[key].(string); return s }

// about reports whether l is about node: its node attribute, or an
// incident of node alone (an incident's closing names no node).
func (l logLine) about(node string) bool { return l.str("node") == node || l.str("hostlist") == node }

// cluster reports whether l is about the cluster's modes.
func (l logLine) cluster() bool {
	msg := l.str("msg")
	return strings.Contains(msg, "mixed modes") || strings.Contains(msg, "one mode again")
}

func (l logLine) suppressed() int { n, _ := l["suppressed"].(float64); return int(n) }

// floodUpdate is the i-th update of a node that flips its mode, its clock
// (the send time: 5 minutes ahead, then right) and its incident's cause (a
// file system of its own, then a wait channel) in every update.
func floodUpdate(i int, now time.Time) *gwpb.Envelope {
	mnt := ""
	if i%2 == 0 {
		mnt = fmt.Sprintf("/flood/%d", i)
	}
	u := hung(uint64(2+i), mnt, false)
	u.Mode, u.StartedMs = gwpb.Mode_MODE_ENFORCE, ms(t0)
	if i%2 == 0 {
		u.Mode = gwpb.Mode_MODE_OBSERVE
	}
	sent := now
	if i%2 == 0 {
		sent = now.Add(5 * time.Minute)
	}
	return &gwpb.Envelope{SentMs: ms(sent), Body: &gwpb.Envelope_State{State: u}}
}

// Issue 26, item 5: with node restriction, one node that flips its mode,
// its clock and its incident's cause in every update (10,000 updates over 5
// minutes) gets at most nodeLogLines lines a minute, the cluster's modes at
// most one, and what was held back is reported and counted; an honest hang
// on another node in the middle of it still logs its incident's opening.
// (Without the bound: 4 lines per update, 8,000 a minute, 40,004 in all.)
func TestLogFloodOfOneNode(t *testing.T) {
	logs := &testutil.SyncBuffer{}
	h := newHarness(t, provenOnly, func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	h.update("honest", &gwpb.StateUpdate{Meta: upMeta(1, 1), StartedMs: ms(t0), Mode: gwpb.Mode_MODE_ENFORCE})

	const updates, span = 10000, 5 * time.Minute
	step := span / updates
	perMinute := updates / int(span/time.Minute)
	var buckets []string // the log of each minute of the flood
	mark := len(logs.String())
	for i := range updates {
		if i > 0 {
			// A minute's bucket is cut before the clock reaches the
			// next minute: each holds the lines of [m:00, m+1:00), in
			// which the cluster's line may come once (a line due at
			// m+1:00 is the next bucket's, whenever it is written).
			if i%perMinute == 0 {
				h.sync()
				text := logs.String()
				buckets, mark = append(buckets, text[mark:]), len(text)
			}
			h.clk.Advance(step)
		}
		if i == updates/2 {
			h.update("honest", hung(2, "/mnt/real", false))
		}
		h.mesh.Deliver("flood", floodUpdate(i, h.clk.Now()))
		h.sync()
	}
	h.sync()
	text := logs.String()
	buckets = append(buckets, text[mark:])

	reported := 0
	for m, b := range buckets {
		own, cluster := 0, 0
		for _, l := range parseLog(t, b) {
			switch {
			case l.cluster():
				cluster++
			case !l.about("honest"): // the flooding node's, its incidents' closings too
				own++
				reported += l.suppressed()
			}
		}
		t.Logf("minute %d: %d lines of the flooding node, %d about the cluster's modes", m, own, cluster)
		if own > nodelog.NodeLogLines {
			t.Errorf("minute %d: %d lines of the flooding node, at most %d", m, own, nodelog.NodeLogLines)
		}
		if cluster > 1 {
			t.Errorf("minute %d: %d lines about the cluster's modes, at most 1", m, cluster)
		}
	}
	all := parseLog(t, text)
	t.Logf("%d lines in all for %d updates", len(all), updates)
	if len(all) > 5*(nodelog.NodeLogLines+1)+10 {
		t.Errorf("%d lines in all for 5 minutes", len(all))
	}

	opened := false
	for _, l := range all {
		if l.str("msg") == "incident opened" && l.str("hostlist") == "honest" {
			opened = true
		}
	}
	if !opened {
		t.Error("the honest node's incident opening was not logged")
	}

	// A minute later the flooding node's next line reports what its
	// last minute held back: every line held back is reported, and
	// counted.
	h.advance(nodelog.NodeLogEvery)
	h.mesh.Deliver("flood", floodUpdate(updates, h.clk.Now()))
	h.sync()
	last := parseLog(t, logs.String()[len(text):])
	for _, l := range last {
		if !l.cluster() {
			reported += l.suppressed()
		}
	}
	held := int(counted(t, h.svc, "log_lines_suppressed_total", "scope", nodelog.ScopeNode))
	if held == 0 || reported != held {
		t.Errorf("%d lines of the node reported suppressed, %d counted: want the same, not 0", reported, held)
	}
	if c := counted(t, h.svc, "log_lines_suppressed_total", "scope", nodelog.ScopeCluster); c == 0 {
		t.Error("no change of the cluster's modes counted suppressed")
	}
	if k := h.svc.lines.Keys(); k > 2 {
		t.Errorf("%d nodes' budgets kept, want the two nodes", k)
	}
}

// lineCounter counts the lines and bytes written to it.
type lineCounter struct{ lines, bytes atomic.Int64 }

func (c *lineCounter) Write(p []byte) (int, error) {
	c.lines.Add(int64(bytes.Count(p, []byte("\n"))))
	c.bytes.Add(int64(len(p)))
	return len(p), nil
}

// BenchmarkLogFlood measures one state update of a node through the
// Service, its log written as JSON: quiet (the same state again: no line,
// the floor) and flood (mode, clock and cause flipped in every update, as
// TestLogFloodOfOneNode), 30 ms apart on the fake clock. It reports the
// log lines and bytes per update; the time per update of flood over quiet
// is what the lines cost the loop.
func BenchmarkLogFlood(b *testing.B) {
	for _, flood := range []bool{false, true} {
		name := "quiet"
		if flood {
			name = "flood"
		}
		b.Run(name, func(b *testing.B) {
			out := &lineCounter{}
			clk := clock.NewFake(t0)
			svc, err := New(Options{Name: "agg-1", Policy: defaultPolicy, Grace: 2 * time.Minute, Clock: clk, ProvenOnly: true,
				Logger: slog.New(slog.NewJSONHandler(out, &slog.HandlerOptions{Level: slog.LevelInfo}))})
			if err != nil {
				b.Fatal(err)
			}
			fm := meshfake.New(svc, svc.clock.Now)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { _ = svc.Run(ctx, fm); close(done) }()
			defer func() { cancel(); <-done }()
			sync := func() {
				if err := svc.Sync(ctx); err != nil {
					b.Fatal(err)
				}
			}
			fm.Deliver("honest", &gwpb.Envelope{Body: &gwpb.Envelope_State{State: &gwpb.StateUpdate{Meta: upMeta(1, 1), StartedMs: ms(t0)}}})
			sync()
			start := out.lines.Load()
			startBytes := out.bytes.Load()
			b.ResetTimer()
			for i := range b.N {
				env := floodUpdate(i, clk.Now())
				if !flood {
					env = floodUpdate(0, clk.Now())
					env.GetState().Meta.Seq = uint64(2 + i)
				}
				fm.Deliver("flood", env)
				sync()
				clk.Advance(30 * time.Millisecond)
			}
			b.StopTimer()
			b.ReportMetric(float64(out.lines.Load()-start)/float64(b.N), "lines/op")
			b.ReportMetric(float64(out.bytes.Load()-startBytes)/float64(b.N), "logB/op")
		})
	}
}

// The lines about the cluster's modes come at most once a minute: changes
// within it are counted, and once it is over a line (without any input to
// wake the loop) says the state then, with the changes that had no line.
func TestClusterModeLinesSpaced(t *testing.T) {
	logs := &testutil.SyncBuffer{}
	h := newHarness(t, func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(logs, nil)) })
	seq := uint64(1)
	mode := func(m gwpb.Mode) {
		seq++
		h.update("n1", &gwpb.StateUpdate{Meta: upMeta(1, seq), StartedMs: ms(t0), Mode: m})
	}
	lines := func() (out []logLine) {
		for _, l := range parseLog(t, logs.String()) {
			if l.cluster() {
				out = append(out, l)
			}
		}
		return out
	}
	h.update("n2", &gwpb.StateUpdate{Meta: upMeta(1, 1), StartedMs: ms(t0), Mode: gwpb.Mode_MODE_ENFORCE})
	mode(gwpb.Mode_MODE_OBSERVE) // mixed: said at once
	if got := lines(); len(got) != 1 || !strings.Contains(got[0].str("msg"), "mixed modes") {
		t.Fatalf("lines %v, want the mixed modes", got)
	}
	for _, m := range []gwpb.Mode{gwpb.Mode_MODE_ENFORCE, gwpb.Mode_MODE_OBSERVE, gwpb.Mode_MODE_ENFORCE} {
		h.advance(10 * time.Second)
		mode(m)
	}
	if got := lines(); len(got) != 1 {
		t.Fatalf("%d lines within the minute, want 1: %v", len(got), got)
	}
	h.advance(30 * time.Second) // the minute is over: the line comes
	got := lines()
	if len(got) != 2 || !strings.Contains(got[1].str("msg"), "one mode again") || got[1].suppressed() != 3 {
		t.Fatalf("lines %v, want one mode again with 3 changes suppressed", got)
	}
	if c := counted(t, h.svc, "log_lines_suppressed_total", "scope", nodelog.ScopeCluster); c != 3 {
		t.Errorf("%v changes counted suppressed, want 3", c)
	}
}

// A node's debug lines take from a budget of their own: a trace of 200
// lines in a minute does not hold back its state and actions.
func TestNodeDebugBudgetApart(t *testing.T) {
	clk := clock.NewFake(t0)
	var held atomic.Int64
	l := nodelog.New(clk, func(string) { held.Add(1) })
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	for i := range nodelog.NodeDebugLines + 5 {
		l.Emit(log, slog.LevelDebug, "n1", "trace", "i", i)
	}
	for i := range nodelog.NodeLogLines {
		l.Emit(log, slog.LevelInfo, "n1", "actuator ran", "i", i)
	}
	debug, info := 0, 0
	for _, line := range parseLog(t, buf.String()) {
		switch line.str("msg") {
		case "trace":
			debug++
		case "actuator ran":
			info++
		}
	}
	if debug != nodelog.NodeDebugLines || info != nodelog.NodeLogLines || held.Load() != 5 {
		t.Errorf("%d debug lines (want %d), %d info lines (want %d), %d held (want 5)", debug, nodelog.NodeDebugLines, info, nodelog.NodeLogLines, held.Load())
	}
	// Past the info budget, held back, whatever the debug budget says.
	l.Emit(log, slog.LevelInfo, "n1", "actuator ran")
	if held.Load() != 6 {
		t.Errorf("an info line past %d a minute was not held back", nodelog.NodeLogLines)
	}
}
