package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gracewatch/gracewatch/aggregator/actuate"
	"github.com/gracewatch/gracewatch/aggregator/incident"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/metrics/metricstest"
	"github.com/gracewatch/gracewatch/mesh"
)

// fakeSource is a Source of fixed values.
type fakeSource struct {
	view    View
	joined  bool
	members []mesh.Member
	incs    []incident.Incident
	limit   actuate.LimitStatus
	skewed  int
}

var _ Source = (*fakeSource)(nil)

func (f *fakeSource) View() View                                            { return f.view }
func (f *fakeSource) Mesh() (bool, []mesh.Member)                           { return f.joined, f.members }
func (f *fakeSource) ClockSkewed() int                                      { return f.skewed }
func (f *fakeSource) Incidents() ([]incident.Incident, actuate.LimitStatus) { return f.incs, f.limit }

// The gauges say what the Source says, and the counters count what they
// are fed: one scrape of a fake Service.
func TestGaugesAndCounters(t *testing.T) {
	d := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	src := &fakeSource{
		view: View{Nodes: []view.Node{
			{Name: "n1", State: view.StateUp},
			{Name: "n2", State: view.StateTeardown, FreeAt: d},
			{Name: "n3", State: view.StateDown, Reason: view.CentralDeadlineReason + "x", Member: "dead"},
		}, Watchers: 2, Lowest: true, Mode: "enforce", NodeModes: map[string]int{"enforce": 3}},
		joined:  true,
		members: []mesh.Member{{Name: "n1", Status: mesh.StatusAlive}, {Name: "n3", Status: mesh.StatusDead}},
		skewed:  1,
	}
	m := New(src, nil)
	m.Transition(view.StateDown, view.CauseCentralDeadline, d, d.Add(5*time.Second))
	m.Refused("stale")
	m.Probe(ProbeGone, true)
	m.IncidentResumed(false)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.Collectors()...)
	want := `
# HELP gracewatch_aggregator_actuator_leader 1 while this aggregator runs the actuators (the live one with the lowest name).
# TYPE gracewatch_aggregator_actuator_leader gauge
gracewatch_aggregator_actuator_leader 1
# HELP gracewatch_aggregator_clock_skewed_nodes Nodes whose clock disagrees with this aggregator's by more than the allowance (policy.clock_skew_allowance, at least 1 s), as measured from the send time of their messages.
# TYPE gracewatch_aggregator_clock_skewed_nodes gauge
gracewatch_aggregator_clock_skewed_nodes 1
# HELP gracewatch_aggregator_node_free_at_timestamp_seconds For a node in teardown: free_at (the latest teardown deadline D) as Unix seconds; absent for other nodes.
# TYPE gracewatch_aggregator_node_free_at_timestamp_seconds gauge
gracewatch_aggregator_node_free_at_timestamp_seconds{node="n2"} 1.7962848e+09
# HELP gracewatch_aggregator_node_grace_violation 1 for a node served down by a grace violation (an overdue teardown its agent reported, or no report by the teardown deadline); absent for other nodes.
# TYPE gracewatch_aggregator_node_grace_violation gauge
gracewatch_aggregator_node_grace_violation{node="n3"} 1
`
	names := []string{"gracewatch_aggregator_actuator_leader", "gracewatch_aggregator_clock_skewed_nodes",
		"gracewatch_aggregator_node_free_at_timestamp_seconds", "gracewatch_aggregator_node_grace_violation"}
	if err := promtest.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	for _, c := range []struct {
		coll  prometheus.Collector
		want  float64
		label string
	}{
		{m.transitions.WithLabelValues("down", view.CauseCentralDeadline), 1, "transitions"},
		{m.refused.WithLabelValues("stale"), 1, "refused stale"},
		{m.probes.WithLabelValues(ProbeGone, "answered"), 1, "probes gone answered"},
		{m.incidentResumes.WithLabelValues(resultFailure), 1, "resumes failed"},
		{m.refused.WithLabelValues("cause"), 0, "refused cause"},
	} {
		if got := promtest.ToFloat64(c.coll); got != c.want {
			t.Errorf("%s: %v, want %v", c.label, got, c.want)
		}
	}
	metricstest.LintCollectors(t, m.Collectors()...)
}
