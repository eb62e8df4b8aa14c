package aggregator

// Observe mode at the aggregator (docs/DESIGN.md §5c): what
// would have been drained is served as such, and nothing is.

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gracewatch/gracewatch/internal/config"
)

// WouldDrain is a violation that observe mode let pass: the drain that
// enforce mode would have run for it.
type WouldDrain struct {
	// At is when the node would have been drained: the earliest deadline
	// of its overdue teardowns (when its agent would have latched it
	// DOWN), the central deadline D + allowance of a silent node, or when
	// an enforcing agent latched it DOWN (under an observing aggregator).
	At time.Time
	// Reason is the reason the drain would have carried: the diagnosis
	// of the overdue teardowns (their reports' summaries), or why the
	// aggregator would have served the node down.
	Reason string
	// Jobs are the overdue jobs, sorted; empty when not known.
	Jobs []string
	// Cause is what their processes wait on; nil when none was named.
	Cause *NodeCause
}

// modeOf is the mode of the agent that sent u ("" without an update). An
// agent that predates modes (MODE_UNSPECIFIED) enforces.
func modeOf(u *NodeUpdate) string {
	if u == nil {
		return ""
	}
	return u.Mode
}

// observing reports whether observe mode applies to in: this aggregator's,
// or its agent's by its latest update.
func observing(in *NodeInput, p Policy) bool {
	return p.Observe || modeOf(in.Update) == config.ModeObserve
}

// centralWouldDrain is the would-be drain of rule 2 (no report after the
// teardown deadline d; down at at) under observe mode.
func centralWouldDrain(in *NodeInput, current bool, d, at time.Time) *WouldDrain {
	wd := &WouldDrain{At: servedTime(at), Reason: centralDeadlineReason + formatTime(d)}
	if current {
		for _, td := range in.Update.teardowns() {
			if td.Phase == "released" || td.Phase == "running" {
				continue
			}
			if t := td.Deadline; !t.IsZero() && !t.After(d) {
				wd.Jobs = append(wd.Jobs, td.Job)
			}
		}
		slices.Sort(wd.Jobs)
	}
	return wd
}

// observeNode applies observe mode to n, as rule 6 of Compute served it
// from in's current update: an observing agent's overdue teardowns become
// n.WouldDrain (their diagnosis and deadline), and, under an observing
// aggregator, a node its (enforcing) agent latched DOWN for a violation is
// served schedulable with the drain it would have had. A DOWN that an
// administrator's drain holds stays down.
func observeNode(n *Node, in *NodeInput, current bool, p Policy) {
	if !current {
		return
	}
	u := in.Update
	if n.Mode == config.ModeObserve {
		if wd := agentWouldDrain(u); wd != nil {
			n.WouldDrain = wd
		}
	}
	if !p.Observe || n.State != StateDown || n.Latch.AdminDrain {
		return
	}
	wd := &WouldDrain{At: n.Since, Reason: n.Reason, Jobs: overdueJobs(u), Cause: n.Latch.Cause}
	if n.WouldDrain == nil || n.WouldDrain.At.After(wd.At) {
		n.WouldDrain = wd
	}
	n.State, n.Schedulable, n.Reason, n.Latch, n.EarlyUntil = StateUp, true, "", Latch{}, time.Time{}
	var free time.Time
	for _, td := range u.Teardowns {
		if td.Phase == "teardown" || td.Phase == "overdue" {
			if d := td.Deadline; d.After(free) {
				free = d
			}
		}
	}
	if !free.IsZero() {
		n.State, n.FreeAt = StateTeardown, servedTime(free)
	}
}

// overdueJobs lists the jobs of u's overdue teardowns, sorted.
func overdueJobs(u *NodeUpdate) []string {
	var jobs []string
	for _, td := range u.teardowns() {
		if td.Phase == "overdue" {
			jobs = append(jobs, td.Job)
		}
	}
	slices.Sort(jobs)
	return jobs
}

// agentWouldDrain is the would-be drain of an observing agent's update u:
// its overdue teardowns, from the earliest deadline among them, with their
// reports' summaries and the agent's observed cause; nil when none is
// overdue.
func agentWouldDrain(u *NodeUpdate) *WouldDrain {
	wd := &WouldDrain{}
	for _, td := range u.teardowns() {
		if td.Phase != "overdue" {
			continue
		}
		wd.Jobs = append(wd.Jobs, td.Job)
		if d := td.Deadline; !d.IsZero() && (wd.At.IsZero() || d.Before(wd.At)) {
			wd.At = d
		}
	}
	if len(wd.Jobs) == 0 {
		return nil
	}
	slices.Sort(wd.Jobs)
	wd.At = servedTime(wd.At)
	var parts []string
	for _, job := range wd.Jobs {
		summary := fmt.Sprintf("job %s teardown past its deadline (not diagnosed yet)", job)
		var taken time.Time
		found := false
		for _, r := range u.Reports {
			if r.Job == job && r.Summary != "" && (!found || r.Taken.After(taken)) {
				summary, taken, found = r.Summary, r.Taken, true
			}
		}
		parts = append(parts, summary)
	}
	wd.Reason = cutText(strings.Join(parts, " | "), maxUpdateReasonBytes)
	wd.Cause = u.ObservedCause
	return wd
}

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
	return m.lineAt.Add(clusterLogEvery)
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
	due := m.lineAt.IsZero() || now.Sub(m.lineAt) >= clusterLogEvery || now.Before(m.lineAt)
	if mixed == m.logged || !due {
		if changed {
			m.changes++
			s.met.logSuppressed.WithLabelValues(scopeCluster).Inc()
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
func (s *Service) modeReadiness(r *Readiness, detail *[]string) {
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
