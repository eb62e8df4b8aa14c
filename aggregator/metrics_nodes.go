package aggregator

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/config"
	"github.com/gracewatch/gracewatch/internal/metrics"
	"github.com/gracewatch/gracewatch/mesh"
)

// nodeCollector serves the per-node families, read from the served view at
// scrape time, for the alerting rules (packaging/examples/prometheus):
//
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
type nodeCollector struct {
	s                        *Service
	state, violation, freeAt *prometheus.Desc
	wouldDrain, wouldDrains  *prometheus.Desc
	mode, nodeModes, mixed   *prometheus.Desc
}

func newNodeCollector(s *Service) *nodeCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, subsystem, name), help, labels, nil)
	}
	return &nodeCollector{
		s: s,
		state: d("node_state", "Always 1, one series per node: its served state (up, teardown, down, unreachable) and the mesh's view of its agent (alive, suspect, dead, left).",
			"node", "state", "member"),
		violation: d("node_grace_violation", "1 for a node served down by a grace violation (an overdue teardown its agent reported, or no report by the teardown deadline); absent for other nodes.",
			"node"),
		freeAt: d("node_free_at_timestamp_seconds", "For a node in teardown: free_at (the latest teardown deadline D) as Unix seconds; absent for other nodes.",
			"node"),
		wouldDrain: d("node_would_drain_timestamp_seconds", "For a node in would-be violation (a violation that observe mode let pass: no signal, no drain, still schedulable): when it would have been drained, as Unix seconds; absent for other nodes.",
			"node"),
		wouldDrains: d("would_drain_nodes", "Nodes in would-be violation: observe mode let their violation pass (see node_would_drain_timestamp_seconds)."),
		mode:        d("mode", "Always 1: this aggregator's mode (enforce or observe).", "mode"),
		nodeModes:   d("nodes_by_mode", "Nodes by the mode their agents run in (enforce or observe); nodes not heard from yet are not counted.", "mode"),
		mixed:       d("modes_mixed", "1 when the nodes' agents and this aggregator do not all run in the same mode, else 0."),
	}
}

var _ prometheus.Collector = (*nodeCollector)(nil)

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.state
	ch <- c.violation
	ch <- c.freeAt
	ch <- c.wouldDrain
	ch <- c.wouldDrains
	ch <- c.mode
	ch <- c.nodeModes
	ch <- c.mixed
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	type row struct {
		name, state, member string
		violation           bool
		freeAt              float64 // 0: none
		wouldDrain          float64 // 0: none
	}
	s := c.s
	s.mu.RLock()
	rows := make([]row, 0, len(s.view))
	for _, n := range s.view {
		r := row{name: n.Name, state: string(n.State), member: string(n.Member), violation: graceViolation(n)}
		if r.member == "" {
			r.member = string(mesh.StatusAlive)
		}
		if n.State == view.StateTeardown && !n.FreeAt.IsZero() {
			r.freeAt = float64(n.FreeAt.UnixMilli()) / 1000
		}
		if w := n.WouldDrain; w != nil {
			// A would-be drain whose time is unknown still counts: at 1 s
			// after the epoch, never absent.
			r.wouldDrain = max(float64(w.At.UnixMilli())/1000, 1)
		}
		rows = append(rows, r)
	}
	own := s.ownMode()
	modes, mixed := map[string]int{}, s.modes.mixed(own)
	for _, m := range []string{config.ModeEnforce, config.ModeObserve} {
		modes[m] = s.modes.nodes[m]
	}
	s.mu.RUnlock()
	would := 0
	for _, r := range rows {
		ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, 1, r.name, r.state, r.member)
		if r.violation {
			ch <- prometheus.MustNewConstMetric(c.violation, prometheus.GaugeValue, 1, r.name)
		}
		if r.freeAt != 0 {
			ch <- prometheus.MustNewConstMetric(c.freeAt, prometheus.GaugeValue, r.freeAt, r.name)
		}
		if r.wouldDrain != 0 {
			would++
			ch <- prometheus.MustNewConstMetric(c.wouldDrain, prometheus.GaugeValue, r.wouldDrain, r.name)
		}
	}
	ch <- prometheus.MustNewConstMetric(c.wouldDrains, prometheus.GaugeValue, float64(would))
	ch <- prometheus.MustNewConstMetric(c.mode, prometheus.GaugeValue, 1, own)
	for m, n := range modes {
		ch <- prometheus.MustNewConstMetric(c.nodeModes, prometheus.GaugeValue, float64(n), m)
	}
	ch <- prometheus.MustNewConstMetric(c.mixed, prometheus.GaugeValue, map[bool]float64{true: 1}[mixed])
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
