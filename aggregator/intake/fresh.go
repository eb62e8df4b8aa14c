package intake

import (
	"fmt"
	"time"

	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// MaxClockAhead is how far ahead of the aggregator's a node's clock may be
// for its messages to be heard (flagged as skewed past the allowance).
const MaxClockAhead = time.Hour

// Fresh checks a node's StateUpdate or ControlAck that arrived at at: the
// send time the node put in it (bound to the message by its proof) must
// be within allowance (the clock skew allowance) of the aggregator's clock
// plus the time a delivery can take (mesh.MaxDelivery: the sender stamps
// it before its dial, and a message delayed by a lossy network is no
// replay; refusing it would also end the sender's retries, which count it
// delivered), not ahead of it by more than MaxClockAhead, and a
// StateUpdate's agent start time not after it. So a captured message
// replayed later (after both the agent and the aggregator restarted, when
// nothing newer is known to order it by) is refused, and so is an agent
// start in the future (a later start wins over every update of an earlier
// one: one in the year 2255 would shut the real agent out). A message
// without a send time passes only when proven is false (an agent of a
// release that did not stamp its messages, heard without proofs anyway).
//
// It returns the node's clock offset as measured (arrival minus send
// time) and, for a refusal, what (the label of intake_refused_total:
// "stale" or "future_start") and why, for the log; what is empty when env
// passes.
func Fresh(env *gwpb.Envelope, at time.Time, allowance time.Duration, proven bool) (offset time.Duration, what, why string) {
	window := allowance + mesh.MaxDelivery
	sentMs := env.GetSentMs()
	if sentMs == 0 {
		if !proven {
			return 0, "", ""
		}
		return 0, "stale", "no send time in a proven message"
	}
	offset = at.Sub(time.UnixMilli(sentMs))
	switch {
	case offset > window:
		return offset, "stale", fmt.Sprintf("sent %v before it arrived, more than the clock allowance and the longest delivery (%v): a replay, or the node's clock is behind",
			offset.Round(time.Millisecond), window)
	case offset < -MaxClockAhead:
		// A send time in the future is no replay (what was captured was
		// sent before): a node whose clock is ahead is heard, flagged
		// (the Service's clock sanity) and its deadline DOWNs not drained
		// before the deadline passes here. Past MaxClockAhead it is
		// implausible.
		return offset, "stale", fmt.Sprintf("sent %v after it arrived, more than the %v a node's clock may be ahead",
			(-offset).Round(time.Millisecond), MaxClockAhead)
	}
	// The agent's start after the send time is implausible (measured on
	// the node's own clock, so that a clock ahead is not taken for it).
	if st := env.GetState().GetStartedMs(); st != 0 && time.UnixMilli(st).After(time.UnixMilli(sentMs).Add(window)) {
		return offset, "future_start", fmt.Sprintf("agent start time %s is in the future", time.UnixMilli(st).UTC().Format(time.RFC3339))
	}
	return offset, "", ""
}
