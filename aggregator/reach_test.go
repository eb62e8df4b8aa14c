package aggregator

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/reach"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// The addresses the nodes proved are kept under state_dir, and an
// aggregator that starts over them asks each of those nodes for its state
// at once, at that address (a signed probe), whatever memberlist knows.
func TestReachKeptAndAskedAfterRestart(t *testing.T) {
	dir := t.TempDir()
	withDir := func(o *Options) { o.StateDir = dir }
	meta := func(seq uint64, addr string) *gwpb.Meta {
		return &gwpb.Meta{Role: gwpb.Role_ROLE_AGENT, Incarnation: 1, Seq: seq, State: gwpb.State_STATE_UP, Addr: addr}
	}
	h := newHarness(t, provenOnly, withDir)
	h.update("node1", &gwpb.StateUpdate{Meta: meta(1, "10.0.0.1:7946"), StartedMs: 1000})
	h.update("node2", &gwpb.StateUpdate{Meta: meta(1, "10.0.0.2:7946"), StartedMs: 1000})
	path := filepath.Join(dir, reach.FileName)
	read := func() string { b, _ := os.ReadFile(path); return string(b) }
	want := "node1 10.0.0.1:7946\nnode2 10.0.0.2:7946\n"
	// The first save is armed at once (no save before): the fake clock's
	// step runs it.
	testutil.Eventually(t, 30*time.Second, "the reach file", func() bool {
		h.clk.Advance(time.Millisecond)
		return read() == want
	})
	// A move within reach.SaveEvery of the last save waits for it.
	h.update("node2", &gwpb.StateUpdate{Meta: meta(2, "10.0.0.3:7946"), StartedMs: 1000})
	h.clk.Advance(reach.SaveEvery / 2)
	if got := read(); got != want {
		t.Fatalf("saved again within %v: %q", reach.SaveEvery, got)
	}
	h.clk.Advance(reach.SaveEvery)
	want = "node1 10.0.0.1:7946\nnode2 10.0.0.3:7946\n"
	if got := read(); got != want {
		t.Fatalf("after %v: %q, want %q", reach.SaveEvery, got, want)
	}

	// A line that is no node and address is skipped; the rest is used.
	if err := os.WriteFile(path, []byte(want+"not a node\nnode3 10.0.0.4:7946\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &testutil.SyncBuffer{}
	again := newHarness(t, provenOnly, withDir, func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	// The probes go out on goroutines of their own.
	asked := map[string]bool{}
	testutil.Eventually(t, 30*time.Second, "node1, node2 and node3 asked at the start", func() bool {
		for _, s := range again.mesh.Sent() {
			if c := s.Env.GetControl(); c != nil && c.GetAction() == gwpb.Action_ACTION_PROBE {
				asked[s.Node] = true
			}
		}
		return asked["node1"] && asked["node2"] && asked["node3"]
	})
	if got, _ := again.mesh.ProvenAddr("node2"); got != "10.0.0.3:7946" {
		t.Errorf("node2 asked at %q, want its last proven address", got)
	}
	if !strings.Contains(logs.String(), "1 lines skipped") {
		t.Errorf("the skipped line is not logged:\n%s", logs.String())
	}

	// Without node restriction nothing is kept or asked: no word is proven.
	open := newHarness(t, func(o *Options) { o.StateDir = t.TempDir() })
	open.update("node1", &gwpb.StateUpdate{Meta: meta(1, "10.0.0.1:7946"), StartedMs: 1000})
	open.clk.Advance(reach.SaveEvery)
	if _, err := os.Stat(filepath.Join(open.svc.opts.StateDir, reach.FileName)); err == nil {
		t.Error("a reach file written without node restriction")
	}
}

// Nodes added a few at a time (an aggregator asking its nodes after a
// restart) or many at once keep the served list sorted and whole.
func TestNamesStaySorted(t *testing.T) {
	h := newHarness(t, provenOnly)
	up := &gwpb.Meta{Role: gwpb.Role_ROLE_AGENT, Incarnation: 1, Seq: 1, State: gwpb.State_STATE_UP}
	for _, name := range []string{"n5", "n1", "n9", "n3", "n7", "n2", "n8", "n4", "n6", "n0"} {
		h.update(name, &gwpb.StateUpdate{Meta: up, StartedMs: 1000})
	}
	for i := range 200 { // many in one batch
		h.mesh.Deliver(fmt.Sprintf("m%03d", 199-i), &gwpb.Envelope{Body: &gwpb.Envelope_State{State: &gwpb.StateUpdate{Meta: up, StartedMs: 1000}}})
	}
	h.sync()
	var names []string
	for _, n := range h.svc.Nodes() {
		names = append(names, n.Name)
	}
	if len(names) != 210 || !slices.IsSorted(names) {
		t.Errorf("%d nodes served, sorted %v: %v", len(names), slices.IsSorted(names), names[:min(len(names), 20)])
	}
}
