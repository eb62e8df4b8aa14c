package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/api"
)

// TestWriteNodesWouldDrain: `aggregator nodes` lists, below the table, the
// drains that observe mode let pass, with when, the jobs, the cause and
// the diagnosis; nothing of the kind when there is none.
func TestWriteNodesWouldDrain(t *testing.T) {
	at := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	nodes := []api.Node{
		{Name: "n1", State: api.StateTeardown, Schedulable: true, FreeAt: &at, WouldDrain: &api.WouldDrain{At: &at,
			Reason: "job 7 teardown exceeded grace 1m0s: 1 unkillable", Jobs: []string{"7"}, FSType: "fuse.hangfs",
			Source: "gracewatch-hangfs", Mountpoint: "/mnt/x", Wchan: "request_wait_answer"}},
		{Name: "n2", State: api.StateTeardown, Schedulable: true, WouldDrain: &api.WouldDrain{At: &at,
			Reason: "no report after teardown deadline", Wchan: "io_schedule"}},
		{Name: "n3", State: api.StateUp, Schedulable: true},
	}
	var b bytes.Buffer
	writeNodes(&b, api.NodeList{Nodes: nodes})
	out := b.String()
	for _, want := range []string{
		"would drain (observe mode: nothing was drained):",
		"n1 at 2026-12-04T10:00:00Z, jobs 7, waiting on fuse.hangfs gracewatch-hangfs on /mnt/x: job 7 teardown exceeded grace 1m0s: 1 unkillable",
		"n2 at 2026-12-04T10:00:00Z, jobs -, waiting on io_schedule: no report after teardown deadline",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, " at 2026-12-04T10:00:00Z") != 2 {
		t.Errorf("n3 has no would-be drain and must not be listed:\n%s", out)
	}
	b.Reset()
	writeNodes(&b, api.NodeList{Nodes: nodes[2:]})
	if strings.Contains(b.String(), "would drain") {
		t.Errorf("a would-drain section without one:\n%s", b.String())
	}
}
