package aggregator

// What a node says of its DOWN latch for incidents (StateUpdate fields
// 40-42), checked where it enters (intakeLatch, intake.go), and the clock sanity that compares the
// node's clock with this aggregator's (docs/DESIGN.md §5b).

import (
	"log/slog"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/mesh"
)

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
// once when it starts and once when it ends (within the node's budget of
// lines, nodelog.go). It runs on the loop.
func (s *Service) clockSkew(in *view.NodeInput) {
	off, was := s.inc.skewed[in.Name]
	bad := skewedOffset(in.ClockOffset, s.clockAllowance())
	switch {
	case bad && !was:
		s.nodeLine(slog.LevelWarn, in.Name, "a node's clock disagrees with this aggregator's: its deadline DOWNs are not drained before the deadline passes here",
			"node", in.Name, "ahead", (-in.ClockOffset).Round(time.Millisecond).String(), "allowance", s.clockAllowance())
	case !bad && was:
		s.nodeLine(slog.LevelInfo, in.Name, "a node's clock agrees with this aggregator's again", "node", in.Name, "was_ahead", (-off).Round(time.Millisecond).String())
	}
	s.inc.mu.Lock()
	if bad {
		s.inc.skewed[in.Name] = in.ClockOffset
	} else {
		delete(s.inc.skewed, in.Name)
	}
	s.inc.mu.Unlock()
}
