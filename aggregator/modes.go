package aggregator

// The modes at the Service: its own, its nodes' agents', and the line
// that says when they are mixed (docs/DESIGN.md §5c).

import (
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/nodelog"
	"github.com/gracewatch/gracewatch/internal/config"
)

// ownMode is this aggregator's mode.
func (s *Service) ownMode() string { return modeName(s.opts.Policy.Observe) }

// modeName is the configuration's name of a mode: observe or enforce.
func modeName(observe bool) string {
	if observe {
		return config.ModeObserve
	}
	return config.ModeEnforce
}

// modeCount counts the served nodes by the mode of their agents (Node.Mode;
// unknown ones are not counted), kept as the view changes so that a mixed
// cluster is told without a walk over every node. nodes is guarded by the
// Service's mu; the log's fields (logMixed) are the loop's own.
type modeCount struct {
	nodes map[string]int

	logged  bool      // the last mixed state logged
	seen    bool      // the last mixed state seen
	lineAt  time.Time // of the last line
	changes int       // changes seen since lineAt that had no line of their own
}

// lineDue is when the line that clusterLogEvery held back is due: the
// state seen is not the one logged; zero when none is.
func (m *modeCount) lineDue() time.Time {
	if m.seen == m.logged {
		return time.Time{}
	}
	return m.lineAt.Add(nodelog.ClusterLogEvery)
}

// move counts a node whose mode changed from one to another ("" for none).
func (m *modeCount) move(from, to string) {
	if from != "" {
		if m.nodes[from]--; m.nodes[from] <= 0 {
			delete(m.nodes, from)
		}
	}
	if to != "" {
		m.nodes[to]++
	}
}

// mixed reports whether the nodes and an aggregator in mode own do not all
// run in one mode.
func (m *modeCount) mixed(own string) bool {
	for mode := range m.nodes {
		if mode != own {
			return true
		}
	}
	return false
}

// describe says how the nodes are split, e.g. "3 nodes enforce, 7 observe".
func (m *modeCount) describe() string {
	var parts []string
	for _, mode := range []string{config.ModeEnforce, config.ModeObserve} {
		if n := m.nodes[mode]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, mode))
		}
	}
	return strings.Join(parts, ", ")
}

// logMixed logs when the cluster becomes mixed, and when it is one mode
// again, at most once per clusterLogEvery: one node that flips its mode in
// every update changes the cluster's as often. A change within the
// interval is counted (log_lines_suppressed_total{scope="cluster"}); once
// it is over, a line says the state then (armTimer wakes the loop for it)
// with the changes that had no line of their own as "suppressed". It runs
// on the loop.
func (s *Service) logMixed(mixed bool, now time.Time) {
	m := &s.modes
	changed := mixed != m.seen
	if changed {
		m.seen = mixed
	}
	due := m.lineAt.IsZero() || now.Sub(m.lineAt) >= nodelog.ClusterLogEvery || now.Before(m.lineAt)
	if mixed == m.logged || !due {
		if changed {
			m.changes++
			s.met.LogSuppressed(nodelog.ScopeCluster)
		}
		return
	}
	suppressed := m.changes
	m.logged, m.lineAt, m.changes = mixed, now, 0
	s.mu.RLock()
	split := s.modes.describe()
	s.mu.RUnlock()
	var more []any
	if suppressed > 0 {
		more = []any{"suppressed", suppressed}
	}
	if mixed {
		s.log.Warn("the cluster runs in mixed modes: every agent and aggregator should have the same mode",
			append([]any{"aggregator_mode", s.ownMode(), "nodes", split}, more...)...)
		return
	}
	s.log.Info("the cluster runs in one mode again", append([]any{"mode", s.ownMode(), "nodes", split}, more...)...)
}

// mixedModes reports whether the cluster runs in mixed modes now.
func (s *Service) mixedModes() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.modes.mixed(s.ownMode())
}

// modeReadiness adds the modes to r and, when mixed, says so in the detail.
func (s *Service) modeReadiness(r *api.Readiness, detail *[]string) {
	own := s.ownMode()
	s.mu.RLock()
	r.Mode, r.ModesMixed, r.NodeModes = own, s.modes.mixed(own), maps.Clone(s.modes.nodes)
	split := s.modes.describe()
	s.mu.RUnlock()
	if r.ModesMixed {
		*detail = append(*detail, fmt.Sprintf("mixed modes: this aggregator is in %s mode, the nodes' agents: %s", own, split))
	} else if own == config.ModeObserve {
		*detail = append(*detail, "observe mode: no actuator runs and no node is drained for a violation")
	}
}
