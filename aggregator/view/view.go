package view

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gracewatch/gracewatch/mesh"
)

// Gone reports whether a member is dead or has left. A suspect member is
// still alive: suspicion is memberlist's transient doubt.
func Gone(s mesh.Status) bool { return s == mesh.StatusDead || s == mesh.StatusLeft }

// servedStatus is the member status Compute goes by at now: in.Status,
// except that a member dead or left counts as alive (the state it had
// before) until heldUntil. A member whose StatusSince is unknown gets no
// such delay.
func servedStatus(in *NodeInput, now time.Time, p Policy) mesh.Status {
	if Gone(in.Status) && now.Before(HeldUntil(in, p)) {
		return mesh.StatusAlive
	}
	return in.Status
}

// Policy is the part of the configuration the view depends on.
type Policy struct {
	// ClockSkewAllowance is added to a teardown deadline before the
	// aggregator itself declares a silent node down: it covers the
	// difference between the agent's clock and the aggregator's, and the
	// delivery of the agent's report.
	ClockSkewAllowance time.Duration
	// UnreachableIsDown serves unreachable nodes (and nodes whose state
	// cannot be read) as down, which also runs the on="down" actuators.
	UnreachableIsDown bool
	// UnreachableAfter is how long a member must have stayed dead or left
	// before it is served unreachable; until then it keeps the state it
	// had, so a member that memberlist declares dead and that refutes it
	// (under packet loss, or at the heal of a partition) never flaps. 0
	// serves it unreachable at once.
	UnreachableAfter time.Duration
	// Settle is how long a node this aggregator has just come to know (at
	// its start, or when the node appears) has to send its own state before
	// gossip alone can make it down: a gossiped meta can be older than the
	// agent's state (memberlist repairs a missed update only at the next
	// push-pull), and an agent sends its state straight to every aggregator
	// it sees join. A node known only from gossip is not served down by the
	// central deadline before NodeInput.FirstSeen + Settle. (The Service
	// also holds the actuators for that long.) 0 trusts gossip at once.
	Settle time.Duration
	// ProbeWait, when positive, makes the aggregator ask before it
	// accuses (see heldUntil and the Service's probes): it is how long a
	// probe's answer is waited for. A node in teardown is asked
	// ProbeWait before its central deadline; a node memberlist says is
	// gone is asked at once, and served as before while the answer may
	// come. 0: no probes (memberlist's word is taken).
	ProbeWait time.Duration
	// Observe is the aggregator's observe mode (mode = "observe"): a node
	// that would be down for a violation (rule 2, or its agent's latch
	// without an administrator's drain) is served schedulable with
	// Node.WouldDrain instead (observe.go).
	Observe bool
	// ReachedFor is how long a proof of life of a node (a proven message:
	// an answer to a probe, a state update) keeps it alive against
	// memberlist's word that it is gone; it is asked again every
	// ReachedFor/3 while memberlist says so.
	ReachedFor time.Duration
}

// NodeInput is everything the aggregator knows about one member that is a
// node (an agent). The Service keeps these; Compute turns them into Nodes.
type NodeInput struct {
	// Name is the member name, which is the node name.
	Name string
	// Role is the member's role as the mesh reports it (roleOf): "agent",
	// or "unspecified" when its meta does not decode (and when empty).
	Role string
	// Status is the member's liveness; empty means the mesh has not told
	// (a direct message came first) and counts as alive.
	Status mesh.Status
	// StatusSince is when the member entered Status; zero when unknown.
	StatusSince time.Time
	// Gossip is the member's gossiped meta as decoded; nil when it has
	// none or it does not decode.
	Gossip *NodeMeta
	// GossipErr is why the NodeMeta does not decode; nil when it does.
	GossipErr error
	// Direct is the newest meta received straight from the agent (in a
	// StateUpdate or a ControlAck); nil when none arrived.
	Direct *NodeMeta
	// Update is the last StateUpdate received from the agent; nil when none.
	// Its reason, teardowns and reports are served only while its meta is
	// the freshest one: otherwise they describe a state the node has left.
	Update *NodeUpdate
	// FirstSeen is when this aggregator first heard of the node, from the
	// mesh or the agent; zero when it learned it otherwise (another
	// aggregator's handover), which Policy.Settle then does not hold.
	FirstSeen time.Time
	// Reached is when the node last proved itself alive directly: a
	// proven, fresh state update or ack arrived (an answer to a probe
	// among them). Zero when never.
	Reached time.Time
	// ProbeFailed is when a probe of the node last went unanswered (or
	// could not be sent). Zero when none.
	ProbeFailed time.Time
	// ClockOffset is the node's clock offset as last measured at the
	// intake: when its latest accepted message arrived here minus the send
	// time the node put in it (the network's delay included). Positive: the
	// node's clock is behind this aggregator's. Zero when unmeasured.
	ClockOffset time.Duration
}

// Node is one node of the view, as Compute derives it: the aggregator's
// own type, kept apart from the HTTP API's api.Node on purpose (as
// kubernetes/node-problem-detector keeps its internal types): the view,
// the events, the actuators and the metrics work on it, and the HTTP edge
// (wire.go) converts it, so the API can stay a promise to schedulers while
// the view changes. A time that is not known is the zero time; every time
// is in UTC, to the millisecond, within year 9999 (servedTime).
type Node struct {
	Name  string
	State State
	// Reason says why the node is down, unreachable or tearing down;
	// empty when up.
	Reason string
	// Since is when the node entered State.
	Since time.Time
	// FreeAt is set only in state teardown: the latest deadline of the
	// teardowns in progress, from which the node may be scheduled.
	FreeAt time.Time
	// Schedulable: up yes; teardown yes from FreeAt; down and unreachable
	// no.
	Schedulable bool
	// Member is the mesh's view of the agent: alive, suspect, dead or left.
	Member mesh.Status
	// Role is the member's role ("agent"; "unspecified" when its meta does
	// not decode).
	Role string
	// Incarnation and Seq order the agent's states: (incarnation, seq) of
	// the freshest meta; zero when none.
	Incarnation uint64
	Seq         uint64
	// DecodeError is set when the gossiped meta does not decode.
	DecodeError string
	// Teardowns are the agent's teardown clocks from its last StateUpdate
	// (active and recently released); empty when unknown.
	Teardowns []Teardown
	// LastReport is the most recent diagnostics report of a violating
	// teardown; nil when none.
	LastReport *Report
	// Latch is what the agent says of its DOWN latch for incidents
	// (StateUpdate fields 40-42, validated at the intake): while the node
	// is down by its agent's own state and that update is current; the
	// zero Latch otherwise.
	Latch Latch
	// Mode is the mode its agent runs in, by its latest StateUpdate:
	// "enforce", "observe", or "" when unknown (nothing received yet; an
	// agent that predates modes enforces and says "enforce").
	Mode string
	// WouldDrain is set while the node would be drained for a violation
	// that observe mode (the agent's or this aggregator's) let pass:
	// when, and why. Nil otherwise.
	WouldDrain *WouldDrain
	// EarlyUntil is set on a DOWN from a teardown deadline that by this
	// aggregator's clock has not passed yet (the node's clock is ahead):
	// that deadline. The reason then names the skew, and the actuators do
	// not drain it before then. Zero otherwise.
	EarlyUntil time.Time
}

// Latch is a node's DOWN latch as its agent describes it.
type Latch struct {
	// Cause is what its violation's processes wait on; nil when none was
	// named (or the agent's cause was refused at the intake).
	Cause *NodeCause
	// Clean: the agent verified that every process of its violations is
	// gone.
	Clean bool
	// AdminDrain: an administrator's drain holds the latch.
	AdminDrain bool
}

// Teardown is one job's teardown clock on a node.
type Teardown struct {
	Job   string
	Phase string
	// Ended is T_end; Deadline is D; Expiration is E (zero: none).
	Ended      time.Time
	Deadline   time.Time
	Expiration time.Time
	Grace      time.Duration
	Outcome    string
	// Released is when the teardown finished (zero while it runs).
	Released time.Time
	// User is the job's user as its registration named it, and Command
	// what kept its teardown running longest (docs/DESIGN.md §3.5); empty
	// when not named, or when the node sent one that breaks the proto's
	// rule.
	User    string
	Command string
}

// Report is a diagnostics report of a violating teardown.
type Report struct {
	Job     string
	Stage   string
	Outcome string
	Summary string
	Taken   time.Time
	// Detail is the agent's whole report (JSON); nil when the agent sent
	// none or it is not valid JSON. Only one node's detail is served with
	// it.
	Detail json.RawMessage
}

// Summary returns n without the report's detail, as lists and watch events
// carry it. It does not modify n.
func (n Node) Summary() Node {
	if n.LastReport != nil && n.LastReport.Detail != nil {
		r := *n.LastReport
		r.Detail = nil
		n.LastReport = &r
	}
	return n
}

// Compute derives the served view from the inputs at time now. It is pure:
// the same inputs, time and policy give the same nodes, sorted by name.
//
// The rules, in order:
//
//  1. The freshest meta is the newer by (incarnation, seq) of the gossiped
//     one and the one received directly; on a tie the direct one, which
//     comes with the untruncated reason.
//  2. A teardown whose deadline D has passed by ClockSkewAllowance with
//     nothing newer is served down, "no report after teardown deadline D",
//     since D + allowance, whether or not the agent is still a live member:
//     an agent that is stuck, or died during the teardown, still goes down
//     on time. D is the earliest deadline of the teardowns in progress when
//     the StateUpdate of that state is known, else the meta's deadline. A
//     node known only from gossip (nothing received from its agent yet) is
//     not served down so before FirstSeen + Settle: its gossip may be stale.
//  3. A dead member, or one that left, is unreachable since it went (or
//     since its last proof of life after that), once heldUntil has passed:
//     it has stayed so for UnreachableAfter, and, with ProbeWait, it has
//     not answered (memberlist's word alone is no proof); until then it is
//     served as alive, with the state it reports (and member "alive").
//  4. A live member whose state cannot be read (its meta does not decode,
//     it published none, or it names a state this build does not know) is
//     unreachable too, with the reason. It is not served down: a decoding
//     bug during a rolling upgrade must not make the actuators drain the
//     whole cluster, and unreachable is not schedulable either.
//  5. With UnreachableIsDown, 3 and 4 are served down instead.
//  6. Otherwise the agent's state: up, teardown (free at the meta's
//     free_at) or down. A down whose StateUpdate is current carries the
//     agent's latch (cause, clean, administrator's drain); one whose every
//     overdue teardown's deadline is still ahead of now (the node's clock
//     runs ahead) is served down with the skew named in its reason and
//     EarlyUntil set to the earliest of those deadlines, when it is
//     computed again.
func Compute(in []NodeInput, now time.Time, p Policy) []Node {
	out := make([]Node, 0, len(in))
	for i := range in {
		out = append(out, ComputeNode(&in[i], now, p))
	}
	slices.SortStableFunc(out, func(a, b Node) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func ComputeNode(in *NodeInput, now time.Time, p Policy) Node {
	n, _ := ComputeNodeCause(in, now, p)
	return n
}

// Causes of a node's served state, by the rule of Compute that gave it:
// the label values of gracewatch_aggregator_transitions_total.
const (
	CauseAgent           = "agent"            // rule 6: the agent's own state
	CauseCentralDeadline = "central_deadline" // rule 2: no report by D + allowance
	CauseUnreachable     = "unreachable"      // rule 3: the member is dead or left
	CauseDecodeError     = "decode_error"     // rule 4: the meta does not decode
	CauseNoState         = "no_state"         // rule 4: the agent published none
	CauseUnknownState    = "unknown_state"    // rule 4: a state this build does not know
)

// CentralDeadlineReason begins the reason of a node down by the central
// deadline (rule 2).
const CentralDeadlineReason = "no report after teardown deadline "

// ComputeNodeCause is computeNode that also says which rule decided the
// state (one of the cause constants).
func ComputeNodeCause(in *NodeInput, now time.Time, p Policy) (Node, string) {
	status := servedStatus(in, now, p)
	n := Node{
		Name:      in.Name,
		Member:    status,
		Role:      cmp.Or(in.Role, RoleUnspecified),
		Teardowns: []Teardown{},
	}
	if n.Member == "" {
		n.Member = mesh.StatusAlive
	}
	if in.GossipErr != nil {
		n.DecodeError = in.GossipErr.Error()
	}
	meta, current := Freshest(in)
	if meta != nil {
		n.Incarnation, n.Seq = meta.Incarnation, meta.Seq
	}
	if current {
		fillDetails(&n, in.Update)
	}
	n.Mode = modeOf(in.Update)
	observe := Observing(in, p)
	reason := ""
	if meta != nil {
		reason = meta.Reason
		if current && in.Update.Reason != "" {
			reason = in.Update.Reason
		}
	}

	// Rule 2: central deadline enforcement.
	if meta != nil && meta.State == AgentTeardown {
		if at, ok := EnforceAt(in, meta, current, p); ok {
			if down := Later(at, settledAt(in, p)); !now.Before(down) && observe {
				n.WouldDrain = centralWouldDrain(in, current, at.Add(-p.ClockSkewAllowance), down)
			} else if !now.Before(down) {
				d := at.Add(-p.ClockSkewAllowance)
				n.State = StateDown
				n.Reason = CentralDeadlineReason + FormatTime(d)
				if Gone(status) {
					n.Reason += " (" + goneReason(status) + ")"
				}
				n.Since = ServedTime(down)
				return n, CauseCentralDeadline
			}
		}
	}

	// Rules 3 to 5: unreachable.
	unreachable, cause := "", ""
	since := goneSince(in)
	switch {
	case Gone(status):
		unreachable, cause = goneReason(status), CauseUnreachable
		if meta != nil && meta.State != AgentUp {
			unreachable += "; last reported " + stateName(meta.State)
			if reason != "" {
				unreachable += ": " + reason
			}
		}
	case meta == nil && in.GossipErr != nil:
		unreachable, cause = "meta does not decode: "+in.GossipErr.Error(), CauseDecodeError
	case meta == nil:
		unreachable, cause = "the agent has published no state", CauseNoState
	case !knownState(meta.State):
		unreachable = fmt.Sprintf("the agent reports an unknown state (%d)", int32(meta.State))
		cause = CauseUnknownState
		since = meta.Since
	}
	if unreachable != "" {
		n.State = StateUnreachable
		n.Reason = unreachable
		if p.UnreachableIsDown {
			n.State = StateDown
			if Gone(status) && !since.IsZero() {
				n.Reason = "unreachable since " + FormatTime(since) + ": " + unreachable
			}
		}
		n.Since = ServedTime(since)
		return n, cause
	}

	// Rule 6: the agent's own state.
	n.Since = ServedTime(meta.Since)
	n.Reason = reason
	if meta.State == AgentDown && current {
		n.Latch = latchOf(in.Update)
		if d, ok := earlyDeadline(in, now); ok {
			n.EarlyUntil = ServedTime(d)
			n.Reason += earlyNote(in, d)
		}
	}
	switch meta.State {
	case AgentUp:
		n.State = StateUp
		n.Schedulable = true
		n.Reason = ""
	case AgentTeardown:
		n.State = StateTeardown
		n.Schedulable = true
		free := meta.FreeAt
		if free.IsZero() {
			free = meta.Deadline
		}
		n.FreeAt = ServedTime(free)
	case AgentDown:
		n.State = StateDown
	}
	observeNode(&n, in, current, p)
	return n, CauseAgent
}

// Freshest returns the freshest meta of in and whether in.Update is of that
// same state (so its reason, teardowns and reports are current).
func Freshest(in *NodeInput) (*NodeMeta, bool) {
	meta := in.Gossip
	if in.Direct != nil && !Newer(meta, in.Direct) {
		meta = in.Direct
	}
	if u := in.Update.meta(); u != nil && !Newer(meta, u) {
		meta = u
	}
	if meta == nil {
		return nil, false
	}
	u := in.Update.meta()
	current := u != nil && u.Incarnation == meta.Incarnation && u.Seq == meta.Seq
	return meta, current
}

// Newer reports whether a is strictly newer than b by (incarnation, seq). A
// nil meta is older than any other.
func Newer(a, b *NodeMeta) bool {
	switch {
	case a == nil:
		return false
	case b == nil:
		return true
	case a.Incarnation != b.Incarnation:
		return a.Incarnation > b.Incarnation
	default:
		return a.Seq > b.Seq
	}
}

// EnforceAt returns when a node in teardown with meta goes down for want of
// a newer report: its deadline D plus the allowance. D is the earliest
// deadline of the teardowns in progress when the StateUpdate of this state
// is known (the agent goes overdue at the first one), else the meta's
// deadline, else its free_at.
func EnforceAt(in *NodeInput, meta *NodeMeta, current bool, p Policy) (time.Time, bool) {
	var d time.Time
	if current {
		for _, td := range in.Update.GetTeardowns() {
			if td.Phase == "released" || td.Phase == "running" {
				continue
			}
			if t := td.Deadline; !t.IsZero() && (d.IsZero() || t.Before(d)) {
				d = t
			}
		}
	}
	if d.IsZero() {
		d = meta.Deadline
	}
	if d.IsZero() {
		d = meta.FreeAt
	}
	if d.IsZero() {
		return time.Time{}, false
	}
	return d.Add(p.ClockSkewAllowance), true
}

// SettleEnd is the end of Policy.Settle after in.FirstSeen; zero when
// nothing is held (settle 0, or a node learned from a handover).
func SettleEnd(in *NodeInput, p Policy) time.Time {
	if p.Settle <= 0 || in.FirstSeen.IsZero() {
		return time.Time{}
	}
	return in.FirstSeen.Add(p.Settle)
}

// settledAt is when what gossip alone says of in may make it down:
// settleEnd while nothing came from its agent; zero when nothing holds it.
func settledAt(in *NodeInput, p Policy) time.Time {
	if in.Update != nil || in.Direct != nil {
		return time.Time{}
	}
	return SettleEnd(in, p)
}

// Later returns the later of a and b.
func Later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// NextEnforcement returns the earliest time after now at which Compute's
// answer for in changes by the passing of time alone, if any: a teardown's
// D + allowance (held until settledAt), or the end of a gone member's
// UnreachableAfter.
func NextEnforcement(in *NodeInput, now time.Time, p Policy) (time.Time, bool) {
	var next time.Time
	if meta, current := Freshest(in); meta != nil && meta.State == AgentTeardown {
		if at, ok := EnforceAt(in, meta, current, p); ok {
			if at = Later(at, settledAt(in, p)); at.After(now) {
				next = at
			}
		}
	}
	if meta, current := Freshest(in); meta != nil && current && meta.State == AgentDown {
		if d, ok := earlyDeadline(in, now); ok && (next.IsZero() || d.Before(next)) {
			next = d
		}
	}
	if at := HeldUntil(in, p); at.After(now) && (next.IsZero() || at.Before(next)) {
		next = at
	}
	return next, !next.IsZero()
}

// fillDetails copies the teardowns and the latest report of u into n.
func fillDetails(n *Node, u *NodeUpdate) {
	n.Teardowns = append(n.Teardowns, u.Teardowns...)
	var last *Report
	for i := range u.Reports {
		if r := &u.Reports[i]; last == nil || !r.Taken.Before(last.Taken) {
			last = r
		}
	}
	if last != nil {
		rep := *last
		rep.Detail = nil
		if len(last.Detail) > 0 {
			rep.Detail = json.RawMessage(slices.Clone(last.Detail))
		}
		n.LastReport = &rep
	}
}

func goneReason(s mesh.Status) string {
	if s == mesh.StatusLeft {
		return "the agent left the mesh"
	}
	return "the mesh declared the agent dead"
}

func knownState(s AgentState) bool {
	return s == AgentUp || s == AgentTeardown || s == AgentDown
}

func stateName(s AgentState) string {
	switch s {
	case AgentUp:
		return "up"
	case AgentTeardown:
		return "teardown"
	case AgentDown:
		return "down"
	}
	return fmt.Sprintf("unknown state (%d)", int32(s))
}

// maxMs is the last millisecond JSON can carry in an RFC 3339 time (year
// 9999): a later one would make encoding/json fail the whole response.
var maxMs = time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC).UnixMilli()

// MsTime converts Unix milliseconds from the wire; zero, negative and
// out-of-range values (a buggy or hostile sender) give the zero time.
func MsTime(ms int64) time.Time {
	if ms <= 0 || ms > maxMs {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// ServedTime returns the zero time for the zero time and for one beyond
// year 9999 (which JSON cannot carry), else t in UTC to the millisecond.
func ServedTime(t time.Time) time.Time {
	if t.IsZero() || t.UTC().Year() > 9999 {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Millisecond)
}

// FormatTime writes t as RFC 3339 in UTC with milliseconds, as in reasons.
func FormatTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// latchOf is the latch of a node's current StateUpdate.
func latchOf(u *NodeUpdate) Latch {
	if u == nil {
		return Latch{}
	}
	return Latch{Cause: u.Cause, Clean: u.Clean, AdminDrain: u.AdminDrain}
}
