// Package api is the aggregator's HTTP API as its clients see it: the JSON
// types of every request and answer (described in proto/openapi.yaml) and
// the Go client. It is a leaf package (the standard library only), so that
// a scheduler's plugin, a script or the command line can speak to an
// aggregator without linking the aggregator, the mesh or memberlist.
//
// The wire types are kept apart from gwpb on purpose: the HTTP API is a
// promise to schedulers, the mesh schema a promise between agents and
// aggregators, and the two evolve separately.
package api

import (
	"encoding/json"
	"fmt"
	"time"
)

// State is a node's state as served to the scheduler (docs/DESIGN.md §2).
type State string

// Served states.
const (
	// StateUp: no teardown in progress; schedulable.
	StateUp State = "up"
	// StateTeardown: a teardown within its grace; schedulable from FreeAt.
	StateTeardown State = "teardown"
	// StateDown: a grace violation, hung processes, an administrator's
	// drain, or a missed teardown deadline; not schedulable.
	StateDown State = "down"
	// StateUnreachable: the aggregator cannot tell the node's state (the
	// mesh declared the agent dead, it left, or what it publishes cannot be
	// read); not schedulable.
	StateUnreachable State = "unreachable"
)

// States lists the served states in the order documented in the API.
var States = []State{StateUp, StateTeardown, StateDown, StateUnreachable}

// ParseState returns the State named s.
func ParseState(s string) (State, error) {
	for _, st := range States {
		if string(st) == s {
			return st, nil
		}
	}
	return "", fmt.Errorf("unknown state %q (want up, teardown, down or unreachable)", s)
}

// Node is one node of the served view. It is the JSON of GET
// /v1/nodes/{name} (and, without LastReport.Detail, of the list and of the
// watch events); see proto/openapi.yaml.
//
// The wire type is kept apart from gwpb.Meta on purpose: the HTTP API is a
// promise to schedulers, the mesh schema a promise between agents and
// aggregators, and the two evolve separately.
type Node struct {
	Name  string `json:"name"`
	State State  `json:"state"`
	// Reason says why the node is down, unreachable or tearing down;
	// empty when up.
	Reason string `json:"reason"`
	// Since is when the node entered State; nil when unknown.
	Since *time.Time `json:"since"`
	// FreeAt is set only in state teardown: the latest deadline of the
	// teardowns in progress, from which the node may be scheduled.
	FreeAt *time.Time `json:"free_at"`
	// Schedulable: up yes; teardown yes from FreeAt; down and unreachable
	// no.
	Schedulable bool `json:"schedulable"`
	// Member is the mesh's view of the agent: alive, suspect, dead or left.
	Member string `json:"member"`
	// Role is the member's role ("agent"; "unspecified" when its meta does
	// not decode).
	Role string `json:"role"`
	// Incarnation and Seq order the agent's states: (incarnation, seq) of
	// the freshest meta; zero when none.
	Incarnation uint64 `json:"incarnation"`
	Seq         uint64 `json:"seq"`
	// DecodeError is set when the gossiped meta does not decode.
	DecodeError string `json:"decode_error,omitempty"`
	// Teardowns are the agent's teardown clocks from its last StateUpdate
	// (active and recently released); empty when unknown.
	Teardowns []Teardown `json:"teardowns"`
	// LastReport is the most recent diagnostics report of a violating
	// teardown; nil when none.
	LastReport *Report `json:"last_report"`
	// Mode is the mode the node's agent runs in, "enforce" or "observe";
	// absent while unknown (nothing received from it yet).
	Mode string `json:"mode,omitempty"`
	// WouldDrain is a violation that observe mode let pass: the node is
	// still schedulable, and this is the drain that enforce mode would
	// have run. Absent otherwise.
	WouldDrain *WouldDrain `json:"would_drain,omitempty"`
}

// WouldDrain is the drain a node would have had in enforce mode.
type WouldDrain struct {
	// At is when it would have been drained (its teardown deadline, or
	// the central deadline D + clock_skew_allowance of a silent node).
	At *time.Time `json:"at"`
	// Reason is the reason the drain would have carried: the diagnosis.
	Reason string `json:"reason"`
	// Jobs are the overdue jobs.
	Jobs []string `json:"jobs"`
	// The cause its processes wait on, when the diagnosis named one: a
	// file system (fstype, source, mountpoint) and the wait channel and
	// class of the worst process.
	FSType     string `json:"fstype,omitempty"`
	Source     string `json:"source,omitempty"`
	Mountpoint string `json:"mountpoint,omitempty"`
	Wchan      string `json:"wchan,omitempty"`
	Class      string `json:"class,omitempty"`
}

// Teardown is one job's teardown clock on a node.
type Teardown struct {
	Job   string `json:"job"`
	Phase string `json:"phase"`
	// Ended is T_end; Deadline is D; Expiration is E (nil: none).
	Ended      *time.Time `json:"ended"`
	Deadline   *time.Time `json:"deadline"`
	Expiration *time.Time `json:"expiration"`
	// Grace is G in seconds.
	Grace   float64 `json:"grace"`
	Outcome string  `json:"outcome"`
	// Released is when the teardown finished (nil while it runs).
	Released *time.Time `json:"released,omitempty"`
	// User is the job's user; Command what kept its teardown running
	// longest. Empty when not known.
	User    string `json:"user,omitempty"`
	Command string `json:"command,omitempty"`
}

// Report is a diagnostics report of a violating teardown.
type Report struct {
	Job     string     `json:"job"`
	Stage   string     `json:"stage"`
	Outcome string     `json:"outcome"`
	Summary string     `json:"summary"`
	Taken   *time.Time `json:"taken"`
	// Detail is the agent's whole report (JSON); only GET
	// /v1/nodes/{name} carries it. Absent when the agent sent none or it is
	// not valid JSON.
	Detail json.RawMessage `json:"detail,omitempty"`
	// DetailOmitted says why Detail is absent from GET /v1/nodes/{name}
	// and how to get it: the detail holds command lines and open files,
	// which only a client with a token is served.
	DetailOmitted string `json:"detail_omitted,omitempty"`
}

// ErrorBody is the JSON body of every error response.
type ErrorBody struct {
	Error string `json:"error"`
}

// ActionRequest is the body of POST /v1/nodes/{name}/resume and /drain.
type ActionRequest struct {
	// Reason says why (required, at most MaxReasonBytes of printable
	// UTF-8); it is logged and, for a drain, becomes the node's reason.
	Reason string `json:"reason"`
}

// NodeList is the body of GET /v1/nodes and the data of a watch snapshot.
type NodeList struct {
	Nodes []Node `json:"nodes"`
}

// ClusterConfig is the body of GET /v1/config: what a scheduler needs to
// agree with the agents.
type ClusterConfig struct {
	// Grace is G in seconds.
	Grace float64 `json:"grace"`
	// ClockSkewAllowance is in seconds.
	ClockSkewAllowance float64 `json:"clock_skew_allowance"`
	UnreachableIsDown  bool    `json:"unreachable_is_down"`
	// UnreachableAfter is in seconds: how long a member must stay dead or
	// left before it is served unreachable.
	UnreachableAfter float64 `json:"unreachable_after"`
	// Settle is in seconds: how long a newly seen node has to send its
	// own state before gossip alone can make it down.
	Settle float64 `json:"settle"`
	// Schema is the mesh schema version this aggregator speaks.
	Schema int `json:"schema"`
	// Mode is what this aggregator does at a violation: "enforce" (drain)
	// or "observe" (serve it as a would-be drain; docs/DESIGN.md §5c).
	Mode string `json:"mode"`
}

// JobRequest is the body of POST /v1/jobs.
type JobRequest struct {
	// Job is the exec system's job id, as the nodes' epilogues will name
	// it (the agent's rules: 1 to 128 bytes, no '/', space or control
	// character).
	Job string `json:"job"`
	// Nodes is the job's nodes as a hostlist ("node[1-4,7]").
	Nodes string `json:"nodes"`
	// Expiration is E (RFC 3339, Unix seconds, "0" for none).
	Expiration string `json:"expiration"`
	// Grace, optional, is the job's own G ("90s").
	Grace string `json:"grace,omitempty"`
}

// JobNodeResult is what one node's agent answered.
type JobNodeResult struct {
	Node  string `json:"node"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// JobResult is the answer of POST /v1/jobs: the job, how many of its nodes
// registered it, and each node's answer, in the hostlist's order.
type JobResult struct {
	Job        string          `json:"job"`
	Registered int             `json:"registered"`
	Failed     int             `json:"failed"`
	Nodes      []JobNodeResult `json:"nodes"`
}

// Forgotten is the data of a "forget" event.
type Forgotten struct {
	Name string `json:"name"`
}

// ReservationList is the body of GET /v1/reservations: the scheduler's
// reservations that gracewatch keeps on nodes tearing down
// ([reservations]; packaging/README.md, "The scheduler's plan").
type ReservationList struct {
	// Enabled: [reservations] command is set.
	Enabled bool `json:"enabled"`
	// Leader: this aggregator keeps them (the others list none; /healthz
	// names the leader).
	Leader       bool              `json:"leader"`
	Reservations []ReservationInfo `json:"reservations"`
	// Error is the last command that failed, until a round succeeds; the
	// scheduler's plan may be stale meanwhile.
	Error   string     `json:"error,omitempty"`
	ErrorAt *time.Time `json:"error_at,omitempty"`
}

// ReservationInfo is one reservation.
type ReservationInfo struct {
	Name string `json:"name"`
	// Nodes is a hostlist ("n[1-4]").
	Nodes string `json:"nodes"`
	Count int    `json:"count"`
	// End is when the scheduler plans the nodes free.
	End time.Time `json:"end"`
}

// IncidentList is the body of GET /v1/incidents: the DOWN nodes grouped by
// the cause they share (docs/DESIGN.md §5b), the open incidents and the
// last closed ones, by id, and the blast-radius limit on drains.
type IncidentList struct {
	Incidents []Incident `json:"incidents"`
	Limit     DrainLimit `json:"drain_limit"`
	// AutoResume: [incidents] auto_resume is on.
	AutoResume bool `json:"auto_resume"`
	// Leader: this aggregator runs the actuators, so its held drains
	// are the ones that wait (the others hold none).
	Leader bool `json:"leader"`
}

// Incident is one group of DOWN nodes that share a cause. Its id is this
// aggregator's (another one, or this one restarted, numbers its own).
type Incident struct {
	ID uint64 `json:"id"`
	// State is "open" while it has nodes, then "closed".
	State string `json:"state"`
	// Kind is filesystem, wchan, undiagnosed, no_report, unreachable or
	// overflow; Cause says it in words ("lustre mds1@o2ib:/scratch on
	// /scratch").
	Kind       string `json:"kind"`
	Cause      string `json:"cause"`
	FSType     string `json:"fstype,omitempty"`
	Source     string `json:"source,omitempty"`
	Mountpoint string `json:"mountpoint,omitempty"`
	Wchan      string `json:"wchan,omitempty"`
	// Nodes is its nodes as a hostlist ("n[1-20]"), Count how many; Peak
	// the most it held at once.
	Nodes string `json:"nodes"`
	Count int    `json:"count"`
	Peak  int    `json:"peak"`
	// Clean is the nodes whose agent verified them clean (their processes
	// gone), as a hostlist.
	Clean      string `json:"clean"`
	CleanCount int    `json:"clean_count"`
	// Held is the nodes whose drain the blast-radius limit holds, as a
	// hostlist; Confirmed says an administrator confirmed the incident,
	// and Confirmation what that covers (absent: not confirmed).
	Held         string        `json:"held"`
	HeldCount    int           `json:"held_count"`
	Confirmed    bool          `json:"confirmed"`
	Confirmation *Confirmation `json:"confirmation,omitempty"`
	// Classes counts its nodes' processes by class.
	Classes map[string]int   `json:"classes"`
	Example *IncidentExample `json:"example,omitempty"`
	// FirstSeen is when it opened, LastSeen when a node last joined or
	// left, Closed when it closed (absent while open); Duration is in
	// seconds, until now while open.
	FirstSeen time.Time  `json:"first_seen"`
	LastSeen  time.Time  `json:"last_seen"`
	Closed    *time.Time `json:"closed,omitempty"`
	Duration  float64    `json:"duration"`
}

// IncidentExample is a process that shows what an incident's nodes wait on.
type IncidentExample struct {
	Node  string `json:"node"`
	Job   string `json:"job,omitempty"`
	PID   int    `json:"pid,omitempty"`
	Comm  string `json:"comm,omitempty"`
	Class string `json:"class,omitempty"`
	Wchan string `json:"wchan,omitempty"`
}

// DrainLimit is the blast-radius limit: at most Limit nodes drained within
// Window seconds without an administrator's confirmation.
type DrainLimit struct {
	Enabled bool `json:"enabled"`
	// Limit is max(drain_limit_nodes, ⌊drain_limit_fraction × KnownNodes⌋),
	// at least 1.
	Limit      int     `json:"limit"`
	Used       int     `json:"used"`
	Window     float64 `json:"window"`
	KnownNodes int     `json:"known_nodes"`
	// Held is the number of drains waiting.
	Held int `json:"held"`
}

// Confirmation is what an administrator's confirmation of an incident
// covers (docs/DESIGN.md §5b): what the administrator saw, never every
// node that joins the incident later.
type Confirmation struct {
	// At is when the incident was last confirmed.
	At time.Time `json:"at"`
	// Nodes is the nodes whose drains it lets past the blast-radius limit
	// (those of the incident when it was confirmed that have not come back
	// since, and those it let through before Until), as a hostlist; Count
	// how many. The drains of the other nodes of the incident take slots
	// of the limit like any other, and are held past it.
	Nodes string `json:"nodes"`
	Count int    `json:"count"`
	// Until, if present, is when it stops covering the drain of every
	// node of the incident as well (the confirmation's "for").
	Until *time.Time `json:"until,omitempty"`
}

// MaxConfirmFor bounds the time a confirmation covers every drain of its
// incident (IncidentConfirmRequest's For; the Service's ConfirmIncident;
// the CLI's --for): a day covers a storm through a night, and no
// confirmation leaves the limit open for longer.
const MaxConfirmFor = 24 * time.Hour

// IncidentConfirmRequest is the body of POST /v1/incidents/{id}/confirm.
type IncidentConfirmRequest struct {
	// Reason says why (required, at most MaxReasonBytes of printable
	// UTF-8); it is logged.
	Reason string `json:"reason"`
	// For, in seconds, makes the confirmation cover for that long the
	// drains of every node of the incident, those that join it included;
	// 0 or absent: the incident's nodes now only. At most 86400.
	For float64 `json:"for,omitempty"`
}

// IncidentConfirmation is the answer of POST /v1/incidents/{id}/confirm.
type IncidentConfirmation struct {
	ID uint64 `json:"id"`
	// Released is how many held drains it let through now.
	Released int `json:"released"`
	// Confirmation is what the incident's confirmation covers now.
	Confirmation
}
