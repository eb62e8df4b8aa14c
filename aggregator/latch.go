package aggregator

// What a node says of its DOWN latch for incidents (StateUpdate fields
// 40-42), checked where it enters, and the clock sanity that compares the
// node's clock with this aggregator's (docs/DESIGN.md §5b).

import (
	"fmt"
	"time"

	"github.com/gracewatch/gracewatch/agent/report"
	"github.com/gracewatch/gracewatch/aggregator/incident"
	"github.com/gracewatch/gracewatch/internal/nodename"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// NodeCause is what a node's latched violation waits on, as its agent
// derived it from its diagnosis (agent/diagnose.CauseOf) and this
// aggregator checked it (checkCause): the aggregator's own type.
type NodeCause struct {
	// FSType, Source and Mountpoint name the file system; empty when none.
	FSType, Source, Mountpoint string
	// Wchan is the worst process's wait channel; Class its class.
	Wchan, Class string
	// Counts are the processes by class (incident.Classes).
	Counts incident.Counts
	// ExamplePID and ExampleComm are the worst process, Job its job.
	ExamplePID  int
	ExampleComm string
	Job         string
}

// maxCauseCount bounds each count of a cause (a node's processes of one
// class): far above the agent's report bound, a sum over 10,000 nodes
// still fits an int.
const maxCauseCount = 1 << 20

// checkCause checks a node's cause by agent/report's bounds: every string
// printable UTF-8 within its bound, a known class. A nil cause is valid.
func checkCause(c *gwpb.Cause) error {
	if c == nil {
		return nil
	}
	rc := report.Cause{FSType: c.GetFstype(), Source: c.GetSource(), Mountpoint: c.GetMountpoint(), Wchan: c.GetWchan(),
		Class: report.Class(c.GetClass()), ExamplePID: int(c.GetExamplePid()), ExampleComm: c.GetExampleComm(), Job: c.GetJob()}
	if err := rc.Check(); err != nil {
		return err
	}
	if rc.Empty() {
		return fmt.Errorf("cause: names neither a file system nor a wait channel")
	}
	return nil
}

// causeOf is c as the view keeps it; nil for nil. c was checked.
func causeOf(c *gwpb.Cause) *NodeCause {
	if c == nil {
		return nil
	}
	n := func(v uint32) int { return int(min(v, maxCauseCount)) }
	return &NodeCause{
		FSType: c.GetFstype(), Source: c.GetSource(), Mountpoint: c.GetMountpoint(), Wchan: c.GetWchan(), Class: c.GetClass(),
		Counts: incident.Counts{n(c.GetUnkillable()), n(c.GetExitHang()), n(c.GetKillableD()), n(c.GetMissed()),
			n(c.GetDying()), n(c.GetZombie())},
		ExamplePID: int(c.GetExamplePid()), ExampleComm: c.GetExampleComm(), Job: c.GetJob(),
	}
}

// latchOf is the latch of a node's current StateUpdate.
func latchOf(u *gwpb.StateUpdate) Latch {
	return Latch{Cause: causeOf(u.GetCause()), Clean: u.GetClean(), AdminDrain: u.GetAdminDrain()}
}

// boundCause is a copy of c without unknown fields (bounds.go copies a
// StateUpdate's known fields only); the intake checks it (intakeLatch).
func boundCause(c *gwpb.Cause) *gwpb.Cause {
	if c == nil {
		return nil
	}
	return &gwpb.Cause{Fstype: c.GetFstype(), Source: c.GetSource(), Mountpoint: c.GetMountpoint(), Wchan: c.GetWchan(),
		Class: c.GetClass(), Unkillable: c.GetUnkillable(), ExitHang: c.GetExitHang(), KillableD: c.GetKillableD(),
		Missed: c.GetMissed(), Dying: c.GetDying(), Zombie: c.GetZombie(), ExamplePid: c.GetExamplePid(),
		ExampleComm: c.GetExampleComm(), Job: c.GetJob()}
}

// intakeLatch checks the cause of a StateUpdate from node: one that breaks
// a bound is dropped (the node is then down without a named cause, so it
// joins no file system's incident), counted (intake_refused_total{what=
// "cause"}) and logged once per node and hour. A node speaks only for
// itself: its cause can only place itself in an incident. It runs on the
// loop.
func (s *Service) intakeLatch(node string, u *gwpb.StateUpdate) {
	err := checkCause(u.GetCause())
	if err == nil {
		return
	}
	u.Cause = nil
	s.met.refused.WithLabelValues("cause").Inc()
	now := s.clock.Now()
	if at, logged := s.inc.causeLogged[node]; logged && now.Sub(at) < time.Hour {
		return
	}
	if len(s.inc.causeLogged) >= maxRefusedLogged {
		clear(s.inc.causeLogged)
	}
	s.inc.causeLogged[node] = now
	s.log.Warn("a node's cause refused: it joins no incident by it", "node", nodename.Quote(node), "err", err)
}

// clockAllowance is the clock offset past which a node is flagged: the
// policy's clock_skew_allowance, at least minClockAllowance.
func (s *Service) clockAllowance() time.Duration {
	return max(s.opts.Policy.ClockSkewAllowance, minClockAllowance)
}

// minClockAllowance is the least clock offset that flags a node: the
// delivery of a message itself takes some of it.
const minClockAllowance = time.Second

// skewedOffset reports whether a measured clock offset (arrival minus send
// time) flags a node: ahead by more than allowance, or behind by more than
// allowance plus the longest delivery (mesh.MaxDelivery; a delivery only
// ever adds to the offset, so a message that a lossy network delayed is
// not taken for a clock behind).
func skewedOffset(off, allowance time.Duration) bool {
	return off < -allowance || off > allowance+mesh.MaxDelivery
}

// clockSkew flags, from the clock offset the intake measured (arrival
// minus the send time the node proved, in.ClockOffset), a node whose clock disagrees with this
// aggregator's by more than the allowance: counted
// (gracewatch_aggregator_clock_skewed_nodes), shown by /readyz, and logged
// once when it starts and once when it ends. It runs on the loop.
func (s *Service) clockSkew(in *NodeInput) {
	off, was := s.inc.skewed[in.Name]
	bad := skewedOffset(in.ClockOffset, s.clockAllowance())
	switch {
	case bad && !was:
		s.log.Warn("a node's clock disagrees with this aggregator's: its deadline DOWNs are not drained before the deadline passes here",
			"node", in.Name, "ahead", (-in.ClockOffset).Round(time.Millisecond).String(), "allowance", s.clockAllowance())
	case !bad && was:
		s.log.Info("a node's clock agrees with this aggregator's again", "node", in.Name, "was_ahead", (-off).Round(time.Millisecond).String())
	}
	s.inc.mu.Lock()
	if bad {
		s.inc.skewed[in.Name] = in.ClockOffset
	} else {
		delete(s.inc.skewed, in.Name)
	}
	s.inc.mu.Unlock()
}

// earlyDeadline returns, for a node whose current StateUpdate is down, the
// earliest deadline of its overdue teardowns when every one of them is
// still after now by this aggregator's clock: the DOWN came early (the
// node's clock is ahead). An administrator's drain is never early.
func earlyDeadline(in *NodeInput, now time.Time) (time.Time, bool) {
	if in.Update.GetAdminDrain() {
		return time.Time{}, false
	}
	var d time.Time
	for _, td := range in.Update.GetTeardowns() {
		if td.GetPhase() != "overdue" {
			continue
		}
		t := msTime(td.GetDeadlineMs())
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
		formatTime(d), ahead)
}
