package view

// The internal node input: what the intake keeps of a node's gossip and
// StateUpdates, decoded and checked once where they enter (package
// aggregator/intake), so that the view works on the aggregator's own types and
// never on the wire's (TestImportsNoWireTypes). The view's output is
// converted to the HTTP type at the HTTP edge (aggregator/httpapi/wire.go); the same
// split as kubernetes/node-problem-detector keeps between its internal
// types and its exporters'.

import (
	"time"

	"github.com/gracewatch/gracewatch/aggregator/incident"
)

// AgentState is a node's state as its agent reports it. Values other than
// AgentUp, AgentTeardown and AgentDown are states this build does not know
// (a newer agent's, or none: 0), kept with the number the agent sent so
// that the view can name it.
type AgentState int32

// The states an agent reports (proto State).
const (
	AgentUp       AgentState = 1
	AgentTeardown AgentState = 2
	AgentDown     AgentState = 3
)

// Roles of a member as NodeInput.Role names them (proto Role).
const (
	RoleAgent       = "agent"
	RoleAggregator  = "aggregator"
	RoleUnspecified = "unspecified"
)

// NodeMeta is an agent's meta (its state and the order of its states), as
// gossiped or sent directly, decoded at the intake: times are in UTC to the
// millisecond, the zero time when the agent sent none or one out of range,
// and the reason is within maxUpdateReasonBytes. Never modified once made.
type NodeMeta struct {
	// Incarnation and Seq order the agent's states (incarnation: agent
	// boots; seq: changes within one).
	Incarnation, Seq uint64
	State            AgentState
	// Since is when State last changed; FreeAt is set in teardown (when
	// the node may be scheduled), Deadline is the teardowns' latest D.
	Since, FreeAt, Deadline time.Time
	Reason                  string
}

// NodeUpdate is an agent's StateUpdate, decoded and checked at the intake
// (intake.DecodeUpdate): its meta, its teardown clocks and reports, what it says of
// its DOWN latch and its mode. Never modified once made, so it is shared
// between the inputs and the handover.
type NodeUpdate struct {
	// Meta is the state the update describes; never nil.
	Meta *NodeMeta
	// Reason is the untruncated reason of that state.
	Reason string
	// StartedMs is when the agent process started, as it sent it (Unix
	// milliseconds; 0 when not sent): it only orders the updates of
	// different agent starts (replacesUpdate).
	StartedMs int64
	// Teardowns are the node's teardown clocks, active ones first, then the
	// released ones kept as records (Teardown.Released, User, Command);
	// at most maxTeardownsKept.
	Teardowns []Teardown
	// Reports are the diagnostics reports, oldest first; at most
	// maxReportsKept, and only the newest keeps its Detail (valid JSON,
	// else nil).
	Reports []Report
	// Cause is what the latched violation's processes wait on, checked
	// (checkCause); nil when none or refused. Clean and AdminDrain are the
	// rest of the latch.
	Cause      *NodeCause
	Clean      bool
	AdminDrain bool
	// Mode is the agent's mode: config.ModeEnforce (an agent that predates
	// modes included) or config.ModeObserve.
	Mode string
	// ObservedCause is an observing agent's cause of its overdue
	// teardowns; nil when none or refused.
	ObservedCause *NodeCause
	// KillPathFloor is the smallest G that does not latch the node before
	// its exec system's own SIGKILL (0: unknown), and KillPath says how it
	// was derived (docs/DESIGN.md §5d).
	KillPathFloor time.Duration
	KillPath      string
}

// meta is u's meta; nil for a nil u.
func (u *NodeUpdate) meta() *NodeMeta {
	if u == nil {
		return nil
	}
	return u.Meta
}

// GetTeardowns is u's teardowns; none for a nil u.
func (u *NodeUpdate) GetTeardowns() []Teardown {
	if u == nil {
		return nil
	}
	return u.Teardowns
}

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
