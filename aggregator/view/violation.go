package view

// Whether a node's change into down is a grace violation, and of which
// deadline (the transition metrics).

import (
	"time"
)

// ViolationDeadline returns the teardown deadline D that a node's change
// into down at now answers, when it is a grace violation: the central
// deadline's D, or, for the agent's own down, the earliest deadline of its
// overdue teardowns (from its StateUpdate), else that of the teardown this
// aggregator served before (prevAt is its enforcement time, D +
// allowance). A down before D (a drain) is not a violation.
func ViolationDeadline(in *NodeInput, cause string, prevAt time.Time, now time.Time, p Policy) (time.Time, bool) {
	meta, current := Freshest(in)
	var d time.Time
	switch cause {
	case CauseCentralDeadline:
		at, ok := EnforceAt(in, meta, current, p)
		if !ok {
			return time.Time{}, false
		}
		d = at.Add(-p.ClockSkewAllowance)
	case CauseAgent:
		if current {
			for _, td := range in.Update.GetTeardowns() {
				if td.Phase != "overdue" {
					continue
				}
				if t := td.Deadline; !t.IsZero() && (d.IsZero() || t.Before(d)) {
					d = t
				}
			}
		}
		if d.IsZero() && !prevAt.IsZero() {
			d = prevAt.Add(-p.ClockSkewAllowance)
		}
	}
	if d.IsZero() || now.Before(d) {
		return time.Time{}, false
	}
	return d, true
}
