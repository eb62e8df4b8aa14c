package aggregator

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gracewatch/gracewatch/aggregator/incident"
	"github.com/gracewatch/gracewatch/internal/metrics"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// series counts the series of reg, by family.
func series(t *testing.T, reg prometheus.Gatherer) (map[string]int, int) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	by, all := map[string]int{}, 0
	for _, mf := range mfs {
		by[mf.GetName()] = len(mf.GetMetric())
		all += len(mf.GetMetric())
	}
	return by, all
}

// Issue 26, item 5: no label takes its values from a node's input without
// a bound. One node that sends 1,000 distinct causes, flips its mode and
// its clock leaves the aggregator's series as they were after its first
// update (its one open incident, its one node); 300 nodes with a cause
// each make at most incident.MaxOpen incidents and the overflow, each
// with its 3 series.
func TestMetricSeriesBounded(t *testing.T) {
	reg := metrics.NewRegistry(metrics.ProgramAggregator)
	h := newHarness(t, provenOnly, func(o *Options) { o.Registry = reg })
	h.update("honest", &gwpb.StateUpdate{Meta: upMeta(1, 1), StartedMs: ms(t0), Mode: gwpb.Mode_MODE_ENFORCE})
	h.mesh.Deliver("flood", floodUpdate(0, h.clk.Now()))
	h.sync()
	before, _ := series(t, reg)
	for i := 1; i <= 1000; i++ {
		h.mesh.Deliver("flood", floodUpdate(2*i, h.clk.Now())) // a new file system each time
		h.mesh.Deliver("flood", floodUpdate(2*i+1, h.clk.Now()))
		h.sync()
		h.clk.Advance(30 * time.Millisecond)
	}
	h.sync()
	after, _ := series(t, reg)
	for name, n := range after {
		// The Go runtime's and the process's own families are not
		// the input's.
		if strings.HasPrefix(name, "gracewatch_") && n != before[name] {
			t.Errorf("%s: %d series after 2,000 flipped updates, %d before", name, n, before[name])
		}
	}

	for i := range 300 {
		h.update(fmt.Sprintf("n%d", i), hung(2, fmt.Sprintf("/mnt/%d", i), false))
	}
	by, _ := series(t, reg)
	const fam = "gracewatch_aggregator_incident_nodes"
	if got, limit := by[fam], incident.MaxOpen+1; got > limit || got < incident.MaxOpen {
		t.Errorf("%s: %d series for 301 distinct causes, want %d (incident.MaxOpen and the overflow)", fam, got, limit)
	}
	for _, f := range []string{"gracewatch_aggregator_incident_clean_nodes", "gracewatch_aggregator_incident_held_drains"} {
		if by[f] != by[fam] {
			t.Errorf("%s: %d series, %s %d", f, by[f], fam, by[fam])
		}
	}
	if got := by["gracewatch_aggregator_nodes_by_mode"]; got != 2 {
		t.Errorf("nodes_by_mode: %d series, want enforce and observe", got)
	}
}
