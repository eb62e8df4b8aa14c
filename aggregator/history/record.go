// Package history is the aggregator's bounded, persistent record of the
// cluster's released teardowns (docs/DESIGN.md §5d): one Record per
// teardown that a node reported released, kept in a directory of
// append-only segment files, bounded in bytes and in age (the oldest
// segment is dropped first), deduplicated and rate-bounded per node, and
// scanned by time window for the grace advisor (package
// aggregator/advisor).
package history

import (
	"errors"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gracewatch/gracewatch/agent/request"
)

// Outcome is how a released teardown ended (the agent's outcome, proto
// Teardown.outcome).
type Outcome uint8

// Outcomes. The order is the file format's: never renumber.
const (
	// OutcomeUnreported: the agent named none, or one this build does
	// not know (an older or newer agent); or it was released by a resume
	// with no end ever known.
	OutcomeUnreported Outcome = iota
	// OutcomeClean: released by its deadline, no signal.
	OutcomeClean
	// OutcomeExited: ended by itself after its deadline, before any
	// signal (in observe mode every overdue teardown that ends does so).
	OutcomeExited
	// OutcomeTerminated: ended by the SIGTERM sent at the deadline.
	OutcomeTerminated
	// OutcomeKilled: ended by SIGKILL.
	OutcomeKilled
	// OutcomeHung: survived SIGKILL (classified hung); released when its
	// processes finally went.
	OutcomeHung
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"unreported", "clean", "exited", "terminated", "killed", "hung"}

// String returns the outcome's name as the agent spells it.
func (o Outcome) String() string {
	if o < numOutcomes {
		return outcomeNames[o]
	}
	return "unreported"
}

// ParseOutcome returns the outcome the agent named; an empty or unknown
// name is OutcomeUnreported.
func ParseOutcome(s string) Outcome {
	for i, n := range outcomeNames {
		if s == n {
			return Outcome(i)
		}
	}
	return OutcomeUnreported
}

// SelfEnded reports whether the teardown's processes ended by themselves
// (no signal ended them): clean or exited.
func (o Outcome) SelfEnded() bool { return o == OutcomeClean || o == OutcomeExited }

// Signalled reports whether enforcement ended it by a signal (terminated,
// killed) or it survived one (hung): how long it would have run by itself
// is not known, only that it ran at least as long as it did.
func (o Outcome) Signalled() bool {
	return o == OutcomeTerminated || o == OutcomeKilled || o == OutcomeHung
}

// Bounds of a Record's fields (the proto's, checked again here: the file
// format relies on them).
const (
	// MaxJobBytes is the agent's bound of a job id (agent/api).
	MaxJobBytes = 128
	// MaxUserBytes is the proto's bound of Teardown.user.
	MaxUserBytes = request.MaxUserBytes
	// MaxCommandBytes is the proto's bound of Teardown.command.
	MaxCommandBytes = 64
	// MaxCauseBytes bounds the cause ("fstype mountpoint" or "wchan
	// NAME"); a longer one is cut.
	MaxCauseBytes = 200
	// MaxNodeBytes is a node name's bound (internal/nodename).
	MaxNodeBytes = 253
	// maxDurationMs is the longest duration the file holds (49.7 days,
	// its 32 bits of milliseconds); a longer one is stored as this, a
	// lower bound. The intake bounds a record well within it
	// (MaxDurationMs).
	maxDurationMs = 1<<32 - 1
)

// Bounds of a record's times and of a node's kill-path floor: what an
// agent can enforce, so that one node's root, who signs what it likes,
// sends nothing past them (docs/DESIGN.md §5d). Every arithmetic on them
// (a start from a deadline and a grace, a duration, a sum of millions of
// durations, a rounding to the second) stays far from overflowing int64.
const (
	// MaxGraceMs is the longest G a record carries: the longest grace an
	// agent accepts for a job (agent/request.MaxGrace, 7 days). A record
	// with a longer one is refused (RefusedBounds).
	MaxGraceMs = int64(request.MaxGrace / time.Millisecond)
	// MaxFloorMs is the largest kill-path floor taken from a node: a day.
	// The floor is the exec system's way to its SIGKILL after a job's
	// limit (Slurm: OverTimeLimit + its 30 s check + KillWait, which is a
	// 16-bit count of seconds, at most 18.2 h; Flux: kill-timeout) plus 5
	// s; past a day it says that the exec system lets a job outlive its
	// limit by more than a day, and no G is advised from that. A larger
	// (or negative) floor is refused at intake, and logged.
	MaxFloorMs = 24 * int64(time.Hour/time.Millisecond)
	// MaxDurationMs is the longest teardown recorded: the longest G plus
	// the longest kill path, 8 days. A teardown that ended by itself (clean,
	// exited) and lasted longer cannot have been let run by any G an agent
	// accepts: refused (RefusedBounds). One that was ended by a signal,
	// outlived it or was never reported (a node drained for weeks, its
	// processes gone at a reboot) is kept as this long: a lower bound, as
	// every signalled one is.
	MaxDurationMs = MaxGraceMs + MaxFloorMs
)

// Record is one released teardown of one node. Times are Unix
// milliseconds on the node's clock (both ends of a duration are the
// node's).
//
// In a Scan callback the strings are the segment's own (shared by every
// record of the segment) and Job is only valid during the callback: copy
// it (JobString) to keep it.
type Record struct {
	// Node is the node that reported it (a node speaks only for itself).
	Node string
	// Job is the job id (bytes, see above).
	Job []byte
	// User is the job's user; "" when none was named or it broke the
	// proto's rule.
	User string
	// Command is what kept the teardown running longest; "" unknown.
	Command string
	// Cause is what the teardown waited on when it was overdue
	// ("fuse.hangfs /scratch", "wchan request_wait_answer"); "" none.
	Cause string
	// StartMs is the start of the teardown clock, min(T_end, E) = D - G.
	StartMs int64
	// ReleasedMs is when every process of it was gone.
	ReleasedMs int64
	// GraceMs is the G in force for it.
	GraceMs int64
	// Outcome is how it ended.
	Outcome Outcome
}

// DurationMs is ReleasedMs - StartMs: the teardown's length, which is
// overdue for a G when greater than G.
func (r *Record) DurationMs() int64 { return r.ReleasedMs - r.StartMs }

// JobString returns a copy of Job.
func (r *Record) JobString() string { return string(r.Job) }

// Raw is a record as its segment stores it, decoded without allocating:
// its strings are ids into its segment's table Strs (id i is Strs[i-1], 0
// the empty string; every id a Raw names is defined). A Raw, its Job and
// Strs are valid during a ScanRaw callback only; Seg tells the segments of
// one scan apart (ids of two segments are unrelated), and a segment's Strs
// only grow while it is read, so what an id names never changes within it.
type Raw struct {
	Outcome                    Outcome
	Node, User, Command, Cause uint32
	StartMs, DurationMs        int64
	GraceMs                    int64
	Job                        []byte
	Strs                       []string
	// Seg counts the segments of the scan, from 0.
	Seg int
}

// Str returns the string of id (0 is "").
func (r *Raw) Str(id uint32) string {
	if id == 0 {
		return ""
	}
	return r.Strs[id-1]
}

// fill sets rec from r (Job shared).
func (r *Raw) fill(rec *Record) {
	*rec = Record{Node: r.Str(r.Node), Job: r.Job, User: r.Str(r.User), Command: r.Str(r.Command), Cause: r.Str(r.Cause),
		StartMs: r.StartMs, ReleasedMs: r.StartMs + r.DurationMs, GraceMs: r.GraceMs, Outcome: r.Outcome}
}

// Refusal is why a record was not stored.
type Refusal string

// The reasons a record is not stored (the metric's label values).
const (
	RefusedDuplicate Refusal = "duplicate"   // already stored (an agent resends recent ones)
	RefusedRate      Refusal = "rate"        // over its node's rate bound
	RefusedClock     Refusal = "clock_step"  // released before it started: the node's clock stepped back
	RefusedFuture    Refusal = "future"      // released more than MaxAhead after now
	RefusedOld       Refusal = "too_old"     // started before the age bound: it would be dropped at once
	RefusedInvalid   Refusal = "invalid"     // no job, no start, a negative grace, a bad node name
	RefusedBounds    Refusal = "bounds"      // a grace past MaxGraceMs, or self-ended and longer than MaxDurationMs
	RefusedWrite     Refusal = "write_error" // the disk refused it
)

// Refusals lists every Refusal, for metrics.
var Refusals = []Refusal{RefusedDuplicate, RefusedRate, RefusedClock, RefusedFuture, RefusedOld, RefusedInvalid, RefusedBounds, RefusedWrite}

// MaxAhead is how far after the aggregator's now a record's release may
// lie (the intake's bound of a node's clock ahead).
const MaxAhead = time.Hour

// validUser reports whether u is a user name by the proto's rule, the one
// registrations are checked with (agent/request.ValidateUser): not empty,
// at most MaxUserBytes of [A-Za-z0-9._-], an optional trailing $, not
// starting with "-".
func validUser(u string) bool {
	return u != "" && request.ValidateUser(u) == nil
}

// ValidCommand reports whether c is a command by the proto's rule:
// printable UTF-8, at most MaxCommandBytes ("" is valid: not known).
func ValidCommand(c string) bool { return len(c) <= MaxCommandBytes && printable(c) }

// printable reports whether s is valid UTF-8 of printable characters.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// cut returns s cut to at most n bytes on a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// errInvalid is a record that cannot be stored; errBounds one past the
// bounds an agent enforces.
var (
	errInvalid = errors.New("invalid record")
	errBounds  = errors.New("record out of bounds")
)

// Clean checks r against the bounds and returns what is stored of it: a
// user that breaks the proto's rule becomes "" (userDropped true), a
// command or cause that is not printable UTF-8 becomes "", a long cause is
// cut. A record without a job or a start, with a job that breaks the
// bound, a negative grace or a bad node name is refused (errInvalid); one
// with a grace past MaxGraceMs too (errBounds).
func Clean(r Record) (_ Record, userDropped bool, err error) {
	if len(r.Job) == 0 || len(r.Job) > MaxJobBytes || !printable(string(r.Job)) {
		return r, false, fmt.Errorf("%w: job id %q: want 1 to %d bytes of printable UTF-8", errInvalid, cut(string(r.Job), 64), MaxJobBytes)
	}
	if r.Node == "" || len(r.Node) > MaxNodeBytes || !printable(r.Node) {
		return r, false, fmt.Errorf("%w: node name", errInvalid)
	}
	if r.GraceMs > MaxGraceMs {
		return r, false, fmt.Errorf("%w: grace %d ms, at most %d", errBounds, r.GraceMs, MaxGraceMs)
	}
	if r.StartMs <= 0 || r.GraceMs < 0 {
		return r, false, fmt.Errorf("%w: start %d, grace %d ms", errInvalid, r.StartMs, r.GraceMs)
	}
	if r.User != "" && !validUser(r.User) {
		r.User, userDropped = "", true
	}
	if !ValidCommand(r.Command) {
		r.Command = ""
	}
	if !printable(r.Cause) {
		r.Cause = ""
	}
	r.Cause = cut(r.Cause, MaxCauseBytes)
	if r.Outcome >= numOutcomes {
		r.Outcome = OutcomeUnreported
	}
	return r, userDropped, nil
}
