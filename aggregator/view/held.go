package view

// How long a node that memberlist says is gone is still served alive, and
// whether its DOWN came early by this aggregator's clock.

import (
	"fmt"
	"time"
)

// HeldUntil is until when a member that memberlist says is dead or left
// is still served alive (zero: not at all): for p.UnreachableAfter after
// it went (so a member that refutes never flaps), and, asking before it
// accuses (p.ProbeWait > 0), while the answer to the probe sent when it
// went may still come (until a probe fails, at most p.ProbeWait), and for
// p.ReachedFor after each proof of life since (an answer, a proven
// update): memberlist's word is no proof, one forged packet can make a
// live node dead in every member's table for minutes.
func HeldUntil(in *NodeInput, p Policy) time.Time {
	if !Gone(in.Status) || in.StatusSince.IsZero() {
		return time.Time{}
	}
	var until time.Time
	if p.UnreachableAfter > 0 {
		until = in.StatusSince.Add(p.UnreachableAfter)
	}
	if p.ProbeWait > 0 {
		if !in.ProbeFailed.After(in.StatusSince) {
			until = Later(until, in.StatusSince.Add(p.ProbeWait))
		}
		if p.ReachedFor > 0 && !in.Reached.IsZero() && !in.Reached.Before(in.StatusSince) {
			until = Later(until, in.Reached.Add(p.ReachedFor))
		}
	}
	return until
}

// goneSince is when a member memberlist says is gone was last known alive:
// when it went, or its last proof of life since.
func goneSince(in *NodeInput) time.Time {
	if in.Reached.After(in.StatusSince) {
		return in.Reached
	}
	return in.StatusSince
}

// earlyDeadline returns, for a node whose current StateUpdate is down, the
// earliest deadline of its overdue teardowns when every one of them is
// still after now by this aggregator's clock: the DOWN came early (the
// node's clock is ahead). An administrator's drain is never early.
func earlyDeadline(in *NodeInput, now time.Time) (time.Time, bool) {
	if in.Update != nil && in.Update.AdminDrain {
		return time.Time{}, false
	}
	var d time.Time
	for _, td := range in.Update.GetTeardowns() {
		if td.Phase != "overdue" {
			continue
		}
		t := td.Deadline
		if t.IsZero() || !t.After(now) {
			return time.Time{}, false // one deadline has passed here: the DOWN stands
		}
		if d.IsZero() || t.Before(d) {
			d = t
		}
	}
	return d, !d.IsZero()
}

// earlyNote is what an early DOWN's reason says after the agent's.
func earlyNote(in *NodeInput, d time.Time) string {
	ahead := "ahead"
	if in.ClockOffset < 0 {
		ahead = (-in.ClockOffset).Round(time.Second).String() + " ahead"
	}
	return fmt.Sprintf(" [early: its deadline %s has not passed by the aggregator's clock; the node's clock is %s; not drained before then]",
		FormatTime(d), ahead)
}
