package view

// Observe mode at the aggregator (docs/DESIGN.md §5c): what
// would have been drained is served as such, and nothing is.

import (
	"fmt"
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

// Observing reports whether observe mode applies to in: this aggregator's,
// or its agent's by its latest update.
func Observing(in *NodeInput, p Policy) bool {
	return p.Observe || modeOf(in.Update) == config.ModeObserve
}

// centralWouldDrain is the would-be drain of rule 2 (no report after the
// teardown deadline d; down at at) under observe mode.
func centralWouldDrain(in *NodeInput, current bool, d, at time.Time) *WouldDrain {
	wd := &WouldDrain{At: ServedTime(at), Reason: CentralDeadlineReason + FormatTime(d)}
	if current {
		for _, td := range in.Update.GetTeardowns() {
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
		if wd := AgentWouldDrain(u); wd != nil {
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
		n.State, n.FreeAt = StateTeardown, ServedTime(free)
	}
}

// overdueJobs lists the jobs of u's overdue teardowns, sorted.
func overdueJobs(u *NodeUpdate) []string {
	var jobs []string
	for _, td := range u.GetTeardowns() {
		if td.Phase == "overdue" {
			jobs = append(jobs, td.Job)
		}
	}
	slices.Sort(jobs)
	return jobs
}

// AgentWouldDrain is the would-be drain of an observing agent's update u:
// its overdue teardowns, from the earliest deadline among them, with their
// reports' summaries and the agent's observed cause; nil when none is
// overdue.
func AgentWouldDrain(u *NodeUpdate) *WouldDrain {
	wd := &WouldDrain{}
	for _, td := range u.GetTeardowns() {
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
	wd.At = ServedTime(wd.At)
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
	wd.Reason = CutText(strings.Join(parts, " | "), MaxUpdateReasonBytes)
	wd.Cause = u.ObservedCause
	return wd
}
