package metrics

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/config"
	"github.com/gracewatch/gracewatch/mesh"
)

// viewCollector reads the served view, the watchers, the leadership and
// the mesh at scrape time (Source), for the dashboards and the alerting
// rules (packaging/examples/prometheus):
//
//   - gracewatch_aggregator_nodes{state}, _watchers, _actuator_leader,
//     _mesh_joined and _mesh_members{status};
//   - gracewatch_aggregator_node_state{node, state, member} 1: one series per
//     node, its served state and the mesh's view of its agent;
//   - gracewatch_aggregator_node_grace_violation{node} 1: a node down by a
//     grace violation (its agent's report of an overdue teardown, or no
//     report by the teardown deadline); absent otherwise, so an
//     administrator's drain does not page;
//   - gracewatch_aggregator_node_free_at_timestamp_seconds{node}: free_at of
//     a node in teardown, when the scheduler may plan on it; absent
//     otherwise;
//   - gracewatch_aggregator_node_would_drain_timestamp_seconds{node}: when
//     a node in would-be violation (observe mode) would have been drained;
//     absent otherwise; and gracewatch_aggregator_would_drain_nodes, how
//     many such nodes there are;
//   - gracewatch_aggregator_mode{mode} 1 (this aggregator's mode),
//     gracewatch_aggregator_nodes_by_mode{mode} (the nodes by their agents'
//     mode) and gracewatch_aggregator_modes_mixed (1 when they differ).
//
// The node label is deliberate: a cluster has at most some 10,000 nodes, one
// series per node and family, and an alert must say which node. Reasons,
// job ids and pids are never labels (unbounded, or changing with every
// job); the reason is in the API and the status page.
type viewCollector struct {
	src                                      Source
	nodes, watchers, leader, joined, members *prometheus.Desc
	state, violation, freeAt                 *prometheus.Desc
	wouldDrain, wouldDrains                  *prometheus.Desc
	mode, nodeModes, mixed                   *prometheus.Desc
}

func newViewCollector(src Source) *viewCollector {
	return &viewCollector{
		src:      src,
		nodes:    desc("nodes", "Nodes by served state.", "state"),
		watchers: desc("watchers", "Watchers of /v1/watch connected."),
		leader:   desc("actuator_leader", "1 while this aggregator runs the actuators (the live one with the lowest name)."),
		joined:   desc("mesh_joined", "1 once the mesh's first join completed."),
		members:  desc("mesh_members", "Mesh members seen (agents and aggregators, this one included), by liveness.", "status"),
		state: desc("node_state", "Always 1, one series per node: its served state (up, teardown, down, unreachable) and the mesh's view of its agent (alive, suspect, dead, left).",
			"node", "state", "member"),
		violation: desc("node_grace_violation", "1 for a node served down by a grace violation (an overdue teardown its agent reported, or no report by the teardown deadline); absent for other nodes.",
			"node"),
		freeAt: desc("node_free_at_timestamp_seconds", "For a node in teardown: free_at (the latest teardown deadline D) as Unix seconds; absent for other nodes.",
			"node"),
		wouldDrain: desc("node_would_drain_timestamp_seconds", "For a node in would-be violation (a violation that observe mode let pass: no signal, no drain, still schedulable): when it would have been drained, as Unix seconds; absent for other nodes.",
			"node"),
		wouldDrains: desc("would_drain_nodes", "Nodes in would-be violation: observe mode let their violation pass (see node_would_drain_timestamp_seconds)."),
		mode:        desc("mode", "Always 1: this aggregator's mode (enforce or observe).", "mode"),
		nodeModes:   desc("nodes_by_mode", "Nodes by the mode their agents run in (enforce or observe); nodes not heard from yet are not counted.", "mode"),
		mixed:       desc("modes_mixed", "1 when the nodes' agents and this aggregator do not all run in the same mode, else 0."),
	}
}

var _ prometheus.Collector = (*viewCollector)(nil)

// Describe implements prometheus.Collector.
func (c *viewCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.nodes, c.watchers, c.leader, c.joined, c.members,
		c.state, c.violation, c.freeAt, c.wouldDrain, c.wouldDrains, c.mode, c.nodeModes, c.mixed} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *viewCollector) Collect(ch chan<- prometheus.Metric) {
	v := c.src.View()
	gauge := func(d *prometheus.Desc, value float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, value, labels...)
	}
	counts := make(map[view.State]int, len(view.States))
	would := 0
	for _, n := range v.Nodes {
		counts[n.State]++
		member := string(n.Member)
		if member == "" {
			member = string(mesh.StatusAlive)
		}
		gauge(c.state, 1, n.Name, string(n.State), member)
		if graceViolation(n) {
			gauge(c.violation, 1, n.Name)
		}
		if n.State == view.StateTeardown && !n.FreeAt.IsZero() {
			gauge(c.freeAt, float64(n.FreeAt.UnixMilli())/1000, n.Name)
		}
		if w := n.WouldDrain; w != nil {
			// A would-be drain whose time is unknown still counts: at 1 s
			// after the epoch, never absent.
			would++
			gauge(c.wouldDrain, max(float64(w.At.UnixMilli())/1000, 1), n.Name)
		}
	}
	for _, st := range view.States {
		gauge(c.nodes, float64(counts[st]), string(st))
	}
	gauge(c.watchers, float64(v.Watchers))
	gauge(c.wouldDrains, float64(would))
	gauge(c.mode, 1, v.Mode)
	for _, m := range []string{config.ModeEnforce, config.ModeObserve} {
		gauge(c.nodeModes, float64(v.NodeModes[m]), m)
	}
	gauge(c.mixed, boolValue(v.Mixed))

	joined, members := c.src.Mesh()
	byStatus := map[mesh.Status]int{}
	for _, mb := range members {
		byStatus[mb.Status]++
	}
	// As the Service decides: the lowest live name, once joined.
	gauge(c.leader, boolValue(v.Lowest && joined))
	gauge(c.joined, boolValue(joined))
	for _, st := range []mesh.Status{mesh.StatusAlive, mesh.StatusSuspect, mesh.StatusDead, mesh.StatusLeft} {
		gauge(c.members, float64(byStatus[st]), string(st))
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// graceViolation reports whether n is served down by a grace violation: the
// central deadline (rule 2 of Compute), or the agent's own down with an
// overdue teardown or a violation report. A down without either is an
// administrator's drain (or an unreachable node with unreachable_is_down).
func graceViolation(n view.Node) bool {
	if n.State != view.StateDown {
		return false
	}
	if strings.HasPrefix(n.Reason, view.CentralDeadlineReason) {
		return true
	}
	for _, td := range n.Teardowns {
		if td.Phase == "overdue" {
			return true
		}
	}
	return n.LastReport != nil && n.LastReport.Stage != "on-demand"
}
