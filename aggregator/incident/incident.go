// Package incident groups the DOWN nodes whose diagnoses share a cause into
// incidents (docs/DESIGN.md §5b): one Lustre server that stops answering, one
// FUSE daemon that dies, hangs hundreds of nodes at once, and an operator
// wants to see one incident with a hostlist, not hundreds of reasons.
//
// Group is pure: from the previous State, the nodes down now and the time,
// it returns the next State and what changed, so that it is tested with a
// fake clock and the Service (its tracker, package aggregator/incidents) owns the I/O: the
// log lines, the metrics, the HTTP answer, the actuators' reasons and the
// recovery. Budget, the blast-radius limit's ledger of drains, is pure too;
// the actuators (aggregator/actuator.go) consult it.
//
// A cause comes only from bounded, validated fields (a node's own
// StateUpdate.cause, checked at the aggregator's intake; or the rule of the
// view that served the node down), never from a free-text reason, and a node
// speaks only for itself: it joins at most one incident, its own, so no node
// can put another into an incident. What moves other nodes because several
// share a cause needs several nodes' word: State.Resumable, the auto-resume's
// evidence, counts distinct nodes that hung with the node resumed and
// cleared, at least MinResumeNodes-1 of them, which one compromised node
// cannot make up. The number of open incidents is bounded by MaxOpen; past it
// the newcomers share one overflow incident.
package incident

import (
	"fmt"
	"strings"
	"time"
)

// Kind is what a cause is made of.
type Kind string

// Kinds of cause, from the most specific.
const (
	// KindFilesystem: the processes hold a file of one file system open
	// (its type, source and mountpoint); one incident while it is open.
	KindFilesystem Kind = "filesystem"
	// KindWchan: no file system named, the processes wait on one kernel
	// wait channel. Nodes join such an incident within Config.Window of
	// its last join; later ones open a new one.
	KindWchan Kind = "wchan"
	// KindUndiagnosed: the agent latched the node down for a violation
	// whose diagnosis named nothing (its processes were gone, or it never
	// had any: a job whose end was not reported), within Config.Window.
	KindUndiagnosed Kind = "undiagnosed"
	// KindNoReport: the aggregator served the node down by its own
	// deadline (no report by D + clock_skew_allowance), within
	// Config.Window: a stuck agent, or many at once.
	KindNoReport Kind = "no_report"
	// KindUnreachable: the node is served down because its agent is
	// unreachable (unreachable_is_down), within Config.Window.
	KindUnreachable Kind = "unreachable"
	// KindOverflow: the nodes whose cause would have opened an incident
	// past MaxOpen.
	KindOverflow Kind = "overflow"
)

// Kinds lists every kind, in the order above.
var Kinds = []Kind{KindFilesystem, KindWchan, KindUndiagnosed, KindNoReport, KindUnreachable, KindOverflow}

// Windowed reports whether nodes join an incident of kind k only within
// Config.Window of its last join.
func (k Kind) Windowed() bool { return k != KindFilesystem && k != KindOverflow }

// Diagnosed reports whether k names what the processes wait on (a file
// system or a wait channel): only such an incident is a shared external
// cause whose clearing may resume its nodes.
func (k Kind) Diagnosed() bool { return k == KindFilesystem || k == KindWchan }

// Cause is what an incident's nodes share. Its strings are within the
// bounds of agent/report (checked where they enter).
type Cause struct {
	Kind       Kind
	FSType     string
	Source     string
	Mountpoint string
	Wchan      string
}

// Key identifies a cause: nodes with the same key may share an incident.
func (c Cause) Key() string {
	switch c.Kind {
	case KindFilesystem:
		return string(c.Kind) + "\x00" + c.FSType + "\x00" + c.Source + "\x00" + c.Mountpoint
	case KindWchan:
		return string(c.Kind) + "\x00" + c.Wchan
	}
	return string(c.Kind)
}

// String describes c for people and for the alert's annotations:
// "lustre mds1@o2ib:/scratch on /scratch", "wait channel
// request_wait_answer", "no report by the teardown deadline".
func (c Cause) String() string {
	switch c.Kind {
	case KindFilesystem:
		s := c.FSType
		if c.Source != "" {
			s += " " + c.Source
		}
		if c.Mountpoint != "" {
			s += " on " + c.Mountpoint
		}
		return s
	case KindWchan:
		return "wait channel " + c.Wchan
	case KindUndiagnosed:
		return "violations whose diagnosis named nothing"
	case KindNoReport:
		return "no report by the teardown deadline"
	case KindUnreachable:
		return "agents unreachable"
	case KindOverflow:
		return fmt.Sprintf("other causes (past %d open incidents)", MaxOpen)
	}
	return string(c.Kind)
}

// Short is c in a few words, for the scheduler's drain reason: "lustre
// /scratch", "fuse.hangfs /mnt/x", "wchan request_wait_answer".
func (c Cause) Short() string {
	switch c.Kind {
	case KindFilesystem:
		if c.Mountpoint != "" {
			return c.FSType + " " + c.Mountpoint
		}
		return strings.TrimSpace(c.FSType + " " + c.Source)
	case KindWchan:
		return "wchan " + c.Wchan
	}
	return strings.ReplaceAll(string(c.Kind), "_", " ")
}

// Classes, from the worst, as the agent names them (docs/DESIGN.md §3.3).
var Classes = []string{"unkillable", "exit-hang", "killable-d", "missed", "dying", "zombie"}

// Counts is a number of processes per class, in the order of Classes.
type Counts [6]int

// Add returns c + o.
func (c Counts) Add(o Counts) Counts {
	for i := range c {
		c[i] += o[i]
	}
	return c
}

// Map is c with the classes as keys, without zeros.
func (c Counts) Map() map[string]int {
	m := map[string]int{}
	for i, n := range c {
		if n > 0 {
			m[Classes[i]] = n
		}
	}
	return m
}

// Example is a process that shows what an incident's nodes wait on.
type Example struct {
	Node  string
	Job   string
	PID   int
	Comm  string
	Class string
	Wchan string
}

// Node is one DOWN node as Group sees it.
type Node struct {
	Name string
	// Cause is what holds it; a zero Kind keeps it out of every incident
	// (an administrator's drain alone).
	Cause Cause
	// Counts are its processes by class; Example its worst process (PID
	// 0: none named).
	Counts  Counts
	Example Example
	// Clean: the agent verified that every process of its violations is
	// gone (StateUpdate.clean).
	Clean bool
	// Unreachable: the node is not down but its state is not known (its
	// agent is unreachable, unreachable_is_down off). It is in no
	// incident, like a node that is not passed at all, but its leaving an
	// incident says nothing of its cause: it is no evidence that the cause
	// cleared (see State.Resumable).
	Unreachable bool
}

// Incident is one group of DOWN nodes that share a cause. Times are the
// aggregator's clock.
type Incident struct {
	// ID numbers the incidents of this aggregator process from 1 (a
	// restarted aggregator, or another one, numbers its own).
	ID    uint64
	Cause Cause
	// Nodes are its nodes now, sorted; Clean those of them that the agent
	// verified clean.
	Nodes []string
	Clean []string
	// Peak is the most nodes it held at once.
	Peak int
	// FirstSeen is when it opened; LastSeen when it last changed (a node
	// joined or left); LastJoin when a node last joined (the window of a
	// windowed kind runs from it).
	FirstSeen, LastSeen, LastJoin time.Time
	// Closed is when its last node left; zero while open.
	Closed time.Time
	// Counts are its nodes' processes by class.
	Counts  Counts
	Example Example
	// Gone are the nodes that left it because their cause cleared (they
	// came back or an administrator forgot them, or they went down for
	// another diagnosed cause; not those whose state is no longer known),
	// with the Group round they left in: the latest MaxGone, oldest first. A node that joins again is
	// taken out, so that none is in Gone and Nodes at once. Empty once
	// closed.
	Gone []Departure
}

// Departure is a node that left an incident because its cause cleared.
type Departure struct {
	Node string
	// Round is State.Round of the Group call it left in.
	Round uint64
}

// Open reports whether i has nodes.
func (i *Incident) Open() bool { return i.Closed.IsZero() }

// Duration is how long i lasted (until now while open).
func (i *Incident) Duration(now time.Time) time.Duration {
	if !i.Open() {
		return i.Closed.Sub(i.FirstSeen)
	}
	return now.Sub(i.FirstSeen)
}

// Bounds and defaults.
const (
	// MaxOpen bounds the open incidents (and so the series of
	// gracewatch_aggregator_incident_nodes): a cause that would open one
	// more puts its node into the one overflow incident. A site with
	// more than a few dozen distinct causes at once has one bigger
	// problem; 256 keeps the metrics and the answer of GET /v1/incidents
	// small whatever the nodes send (each node is in at most one
	// incident, so open incidents never outnumber the down nodes either).
	MaxOpen = 256
	// MaxClosed is how many closed incidents are kept for GET
	// /v1/incidents (the most recent).
	MaxClosed = 64
	// DefaultWindow is how long after its last join a windowed incident
	// (wait channel, undiagnosed, no report, unreachable) still takes
	// nodes: a storm that lasts a few minutes is one incident; the same
	// wait channel an hour later is another.
	DefaultWindow = 10 * time.Minute
	// MinResumeNodes is the least, and the default, auto_resume_min_nodes:
	// a node is resumed on an incident's evidence only if at least
	// MinResumeNodes-1 other nodes shared its cause with it and cleared
	// (State.Resumable). 3, because one compromised node speaks for one
	// node: with the node resumed and the liar, a third, honest node must
	// have hung on the cause and cleared, which one liar cannot forge.
	MinResumeNodes = 3
	// MaxGone bounds Incident.Gone, and so auto_resume_min_nodes (at most
	// MaxGone): the evidence never needs more departures than that.
	MaxGone = 64
)
