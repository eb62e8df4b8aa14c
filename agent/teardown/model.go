package teardown

import (
	"time"

	"github.com/gracewatch/gracewatch/agent/diagnose"
)

// The supervisor's own view of the node and its jobs: what it tells its
// callers (Status, and OnChange on every change) and what they read. These
// types are kept apart from every wire format on purpose, as
// kubernetes/node-problem-detector keeps its internal types: the socket API
// (agent/api), the mesh meta and StateUpdate (gwpb) and the metrics are
// promises to other programs and convert from these at their edges (package
// agent), so the supervisor can change what it holds without breaking an
// exec system, an aggregator of another release or a dashboard. A time that
// is not known is the zero time, not a nil pointer (that is a JSON concern).

// NodeState is the node's state as the supervisor derives it.
type NodeState string

// Node states.
const (
	StateUp       NodeState = "up"       // no teardown in progress
	StateTeardown NodeState = "teardown" // tearing down: schedulable from FreeAt
	StateDown     NodeState = "down"     // latched DOWN: a violation or a drain
)

// Phase is where a job is in its life on the node.
type Phase string

// Job phases.
const (
	PhaseRunning  Phase = "running"  // registered; no end known
	PhaseTeardown Phase = "teardown" // ended; tearing down until its deadline
	PhaseOverdue  Phase = "overdue"  // its deadline passed before its teardown ended
	PhaseReleased Phase = "released" // its teardown ended
)

// MaxListedProcesses bounds Job.Processes.
const MaxListedProcesses = 64

// Job is the supervisor's report of one job.
type Job struct {
	ID    string
	Phase Phase
	// Expiration is E; zero when the job has none.
	Expiration time.Time
	Grace      time.Duration
	// Ended is T_end (zero while no end is known), and EndedBy what told
	// it: "report" (job end), "epilog", "cgroup" (it emptied).
	Ended   time.Time
	EndedBy string
	// Deadline is D = min(T_end, E) + G (E + G while running); zero
	// without E and T_end.
	Deadline time.Time
	// Held is set while the job's E is in question (the expiration
	// command runs, for a teardown or for a running job at E + G): the
	// latch waits for the answer until then, past D if need be; and once
	// the job is overdue, until its latch lands (at most latchWait after
	// it was judged, which is past D when the answer came late). Judged
	// is the later of D and Held.
	Held time.Time
	// Cgroup is the agent's own job cgroup; Foreign the observed one (a
	// directory), ForeignName its /proc/PID/cgroup form, and Processes
	// the pids it held when last observed (at most MaxListedProcesses),
	// while the job is not released.
	Cgroup      string
	Foreign     string
	ForeignName string
	Processes   []int
	Epilogs     int    // epilogues started
	Escalation  string // "", "term", "kill", "classified"
	Outcome     string // released: "clean", "exited", "terminated", "killed", "hung", "unreported"
	Released    time.Time
	// User is the job's user as its registration named it; "" when none
	// did (request.ValidateUser).
	User string
	// Command is what kept the teardown running longest: the worst
	// process's comm in its latest diagnosis, else its epilogue's program
	// name; "" when neither is known. Printable, at most 64 bytes.
	Command string
}

// Hung is a supervised process that outlived its job's deadline, as the
// job's latest report classified it.
type Hung struct {
	Job   string
	PID   int
	Comm  string
	Class string
	State string
	Wchan string
}

// Status is the node's state: the supervisor's change notification
// (Options.OnChange) and the answer of Supervisor.Status.
type Status struct {
	Node   string
	State  NodeState
	Reason string
	Since  time.Time
	// FreeAt is when a node tearing down is free (the latest deadline);
	// zero in any other state.
	FreeAt time.Time
	// Seq counts changes; (Incarnation, Seq) never goes backwards, so a
	// reader can tell the newer of two statuses.
	Seq         uint64
	Incarnation uint64
	Jobs        []Job
	Hung        []Hung
	// StateFile is set while the state file cannot be written.
	StateFile *StateFileError
	// Cause is what the latched violations' processes wait on (the worst
	// of their latest reports, diagnose.CauseOf), while the node is down
	// for one; nil otherwise, or when no report named anything.
	Cause *diagnose.Cause
	// Clean: the node is down only for grace violations, and every
	// process of those teardowns is gone (what auto_resume = "when-clean"
	// waits for).
	Clean bool
	// AdminDrain: an administrator's drain holds the latch.
	AdminDrain bool
	// Observe: the agent runs in observe mode (Options.Observe).
	Observe bool
	// Observed lists the jobs overdue in observe mode (never signalled,
	// not latched), sorted; ObservedCause is what they wait on (as Cause),
	// nil when none or no report named anything.
	Observed      []string
	ObservedCause *diagnose.Cause
}

// StateFileError is a streak of failed writes of the state file: deadlines
// are enforced from memory, but a restart would lose every change since
// Since.
type StateFileError struct {
	Path     string
	Error    string // the latest failure
	Since    time.Time
	Failures int
}

// Judged is when the job's teardown is judged at the latest: D, or while
// its E is in question the bound of the question (Held) if later. The
// aggregators' central deadline is derived from it (agent/meshlink); the
// node's free_at, the scheduler's plan, from D.
func (j Job) Judged() time.Time {
	if j.Held.After(j.Deadline) {
		return j.Held
	}
	return j.Deadline
}
