package incidents

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/actuate"
	"github.com/gracewatch/gracewatch/aggregator/incident"
	"github.com/gracewatch/gracewatch/aggregator/nodelog"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/testutil"
)

// fakeActuators is the actuators' limit as a Tracker sees it: nothing
// held, and the confirmations recorded.
type fakeActuators struct {
	mu        sync.Mutex
	leading   bool
	forgotten []uint64
	confirmed []uint64
}

var _ Actuators = (*fakeActuators)(nil)

func (f *fakeActuators) ForgetIncident(id uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgotten = append(f.forgotten, id)
}
func (f *fakeActuators) LimitStatus() actuate.LimitStatus { return actuate.LimitStatus{} }
func (f *fakeActuators) Drains() bool                     { return true }
func (f *fakeActuators) StillLeading() bool               { return f.leading }
func (f *fakeActuators) Confirm(id uint64, nodes []string, until time.Time) actuate.ConfirmScope {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.confirmed = append(f.confirmed, id)
	return actuate.ConfirmScope{Nodes: nodes, Until: until}
}

// fakeCounters counts what a Tracker counts.
type fakeCounters struct {
	mu                     sync.Mutex
	opened, closed, resume int
}

func (f *fakeCounters) IncidentOpened() { f.mu.Lock(); f.opened++; f.mu.Unlock() }
func (f *fakeCounters) IncidentClosed() { f.mu.Lock(); f.closed++; f.mu.Unlock() }
func (f *fakeCounters) IncidentResumed(ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ok {
		f.resume++
	}
}

type tracker struct {
	*Tracker
	clk     *clock.Fake
	act     *fakeActuators
	count   *fakeCounters
	logs    *testutil.SyncBuffer
	resumed chan string
}

func newTracker(t *testing.T, cfg incident.Config) *tracker {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC))
	tr := &tracker{clk: clk, act: &fakeActuators{leading: true}, count: &fakeCounters{}, logs: &testutil.SyncBuffer{}, resumed: make(chan string, 16)}
	tr.Tracker = New(Deps{Config: cfg, Allowance: 5 * time.Second, Name: "agg-1", Actuators: tr.act, Counters: tr.count,
		Resume: func(_ context.Context, node, reason, by string) error {
			tr.resumed <- node + ": " + by
			return nil
		},
		Leader: func() string { return "agg-0" }, Clock: clk,
		Log: slog.New(slog.NewTextHandler(tr.logs, nil)), Lines: nodelog.New(clk, func(string) {})})
	return tr
}

func downOn(name, mountpoint string, clean bool) view.Node {
	return view.Node{Name: name, State: view.StateDown, Reason: "hung",
		Latch: view.Latch{Cause: &view.NodeCause{FSType: "nfs", Source: "srv:/x", Mountpoint: mountpoint}, Clean: clean}}
}

// Two nodes down on the same file system are one incident, logged and
// counted once; it closes when they come back, and the actuators forget it.
func TestTrackGroupsAndCloses(t *testing.T) {
	tr := newTracker(t, incident.Config{})
	now := tr.clk.Now()
	tr.Track(downOn("n1", "/mnt/x", false), view.CauseAgent)
	tr.Track(downOn("n2", "/mnt/x", false), view.CauseAgent)
	tr.Regroup(now)
	incs, _ := tr.Incidents()
	if len(incs) != 1 || !incs[0].Open() || len(incs[0].Nodes) != 2 {
		t.Fatalf("incidents %+v, want one open of 2 nodes", incs)
	}
	if info := tr.ActInfo(downOn("n1", "/mnt/x", false)); info.Incident != incs[0].ID || !strings.HasPrefix(info.Prefix, "incident ") || !info.Limited {
		t.Errorf("act info %+v", info)
	}
	for _, name := range []string{"n1", "n2"} {
		tr.Track(view.Node{Name: name, State: view.StateUp}, view.CauseAgent)
	}
	tr.Regroup(now.Add(time.Minute))
	if tr.count.opened != 1 || tr.count.closed != 1 || len(tr.act.forgotten) != 1 {
		t.Errorf("opened %d, closed %d, forgotten %v: want 1, 1, one", tr.count.opened, tr.count.closed, tr.act.forgotten)
	}
	for _, line := range []string{"incident opened", "incident closed"} {
		if n := strings.Count(tr.logs.String(), line); n != 1 {
			t.Errorf("%d lines %q, want 1:\n%s", n, line, tr.logs)
		}
	}
}

// A confirmation is refused out of its bounds, for an unknown incident,
// and off the leader (naming the leader); on the leader it reaches the
// actuators.
func TestConfirm(t *testing.T) {
	tr := newTracker(t, incident.Config{})
	tr.Track(downOn("n1", "/mnt/x", false), view.CauseAgent)
	tr.Regroup(tr.clk.Now())
	incs, _ := tr.Incidents()
	id := incs[0].ID
	for _, c := range []struct {
		name string
		id   uint64
		d    time.Duration
		want error
	}{
		{"negative", id, -time.Second, ErrConfirmFor},
		{"too long", id, MaxConfirmFor + time.Second, ErrConfirmFor},
		{"unknown", id + 1, 0, ErrUnknownIncident},
		{"ok", id, time.Hour, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := tr.Confirm(c.id, "disk", "root", c.d); !errors.Is(err, c.want) {
				t.Errorf("error %v, want %v", err, c.want)
			}
		})
	}
	if len(tr.act.confirmed) != 1 {
		t.Errorf("confirmed %v, want one", tr.act.confirmed)
	}
	tr.act.leading = false
	if _, err := tr.Confirm(id, "disk", "root", 0); !errors.Is(err, ErrNotLeader) || !strings.Contains(err.Error(), "agg-0") {
		t.Errorf("off the leader: %v", err)
	}
}

// With auto_resume, the clean nodes of an incident that enough nodes say
// cleared are asked to resume, once, by the leader only.
func TestAutoResume(t *testing.T) {
	tr := newTracker(t, incident.Config{AutoResume: true})
	nodes := map[string]view.Node{}
	for _, name := range []string{"n1", "n2", "n3"} {
		nodes[name] = downOn(name, "/mnt/x", true)
	}
	for _, n := range nodes {
		tr.Track(n, view.CauseAgent)
	}
	tr.Regroup(tr.clk.Now())
	lookup := func(name string) (view.Node, bool) { n, ok := nodes[name]; return n, ok }
	tr.AutoResume(context.Background(), tr.clk.Now(), false, lookup)
	if len(tr.asked) != 0 {
		t.Fatalf("asked %v while not leading", tr.asked)
	}
	tr.AutoResume(context.Background(), tr.clk.Now(), true, lookup)
	got := map[string]bool{}
	for range incident.MinResumeNodes {
		select {
		case r := <-tr.resumed:
			got[r] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("resumed %v, want the %d nodes", got, incident.MinResumeNodes)
		}
	}
	for name := range nodes {
		if !got[name+": agg-1 (incident auto-resume)"] {
			t.Errorf("resumed %v: not %s", got, name)
		}
	}
	// A second call within resumeRetry asks no one again: each node is
	// marked asked by the first.
	asked := maps.Clone(tr.asked)
	tr.AutoResume(context.Background(), tr.clk.Now().Add(time.Second), true, lookup)
	if !maps.Equal(asked, tr.asked) || len(asked) != len(nodes) {
		t.Errorf("asked %v, then %v: want each node once", asked, tr.asked)
	}
}

// A node's clock ahead past the allowance is flagged and logged once;
// back within it, it is cleared.
func TestClockSkew(t *testing.T) {
	tr := newTracker(t, incident.Config{})
	tr.ClockSkew("n1", -10*time.Second)
	tr.ClockSkew("n1", -10*time.Second)
	if tr.SkewedCount() != 1 || tr.Skewed()["n1"] != -10*time.Second {
		t.Fatalf("skewed %v", tr.Skewed())
	}
	tr.ClockSkew("n1", 0)
	if tr.SkewedCount() != 0 {
		t.Errorf("still skewed: %v", tr.Skewed())
	}
	var b bytes.Buffer
	b.WriteString(tr.logs.String())
	if strings.Count(b.String(), "clock disagrees") != 1 || strings.Count(b.String(), "agrees with this aggregator's again") != 1 {
		t.Errorf("log:\n%s", b.String())
	}
	if ClockAllowance(0) != minClockAllowance || ClockAllowance(time.Minute) != time.Minute {
		t.Error("ClockAllowance")
	}
}
