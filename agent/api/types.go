// Package api is the node agent's local API: HTTP/1.1 over a Unix socket,
// JSON bodies, peers checked with SO_PEERCRED. It holds the wire types, the
// server (which calls a Service) and the client used by the CLI.
//
// The wire types here are kept apart from the supervisor's internal state on
// purpose: the socket API is a compatibility promise to exec systems (Flux's
// housekeeping, Slurm's Epilog scripts), the internal types are not.
package api

import (
	"context"
	"time"

	"github.com/gracewatch/gracewatch/agent/report"
	"github.com/gracewatch/gracewatch/agent/request"
)

// Node states.
const (
	StateUp       = "up"
	StateTeardown = "teardown"
	StateDown     = "down"
)

// Job phases.
const (
	PhaseRunning  = "running"
	PhaseTeardown = "teardown"
	PhaseOverdue  = "overdue"
	PhaseReleased = "released"
)

// MaxBodyBytes bounds every request body.
const MaxBodyBytes = 64 << 10

// Frame is one line of the newline-delimited JSON stream answering an epilog
// request. Data is base64 in JSON. The last frame has Stream "exit" (with
// Status) or "error" (with Error).
type Frame struct {
	Stream string `json:"stream"` // stdout, stderr, exit, error
	Data   []byte `json:"data,omitempty"`
	Status *int   `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
}

// Job is a registered job as reported by status.
type Job struct {
	ID         string     `json:"id"`
	Phase      string     `json:"phase"`
	Expiration *time.Time `json:"expiration"` // nil: no expiration
	Grace      string     `json:"grace"`
	Ended      *time.Time `json:"ended,omitempty"`    // T_end
	EndedBy    string     `json:"ended_by,omitempty"` // what told T_end: report (job end), epilog, cgroup (it emptied)
	Deadline   *time.Time `json:"deadline"`           // D = min(T_end, E) + G; E + G while running; nil without E and T_end
	Cgroup     string     `json:"cgroup,omitempty"`   // the agent's own job cgroup
	Foreign    string     `json:"foreign,omitempty"`  // observed cgroup (directory)
	// ForeignName is the observed cgroup in /proc/PID/cgroup form, and
	// Processes the pids it held when last observed (at most
	// MaxListedProcesses), while the job is not released.
	ForeignName string     `json:"foreign_name,omitempty"`
	Processes   []int      `json:"processes,omitempty"`
	Epilogs     int        `json:"epilogs"`              // epilogues started
	Escalation  string     `json:"escalation,omitempty"` // "", "term", "kill", "classified"
	Outcome     string     `json:"outcome,omitempty"`    // released: "clean", "terminated", "killed", "hung"
	Released    *time.Time `json:"released,omitempty"`
	// User is the job's user as its registration named it (absent: none
	// did); Command what kept its teardown running longest (the worst
	// process's comm in its latest diagnosis, else its epilogue's program
	// name).
	User    string `json:"user,omitempty"`
	Command string `json:"command,omitempty"`
	// Warnings, in the answer to a registration, say what of it was
	// dropped without failing it (a user name that breaks
	// request.ValidateUser: the job is supervised without one).
	Warnings []string `json:"warnings,omitempty"`
}

// Hung is a supervised process that outlived its deadline.
type Hung struct {
	Job   string `json:"job"`
	PID   int    `json:"pid"`
	Comm  string `json:"comm"`
	Class string `json:"class"`
	State string `json:"state"`
	Wchan string `json:"wchan"`
}

// Status is the answer of GET /v1/status.
type Status struct {
	Node   string     `json:"node"`
	State  string     `json:"state"` // up, teardown, down
	Reason string     `json:"reason"`
	Since  time.Time  `json:"since"`
	FreeAt *time.Time `json:"free_at"`
	Seq    uint64     `json:"seq"`
	// Incarnation counts agent starts; (Incarnation, Seq) never goes
	// backwards, so a reader can tell the newer of two statuses.
	Incarnation uint64 `json:"incarnation"`
	Jobs        []Job  `json:"jobs"`
	Hung        []Hung `json:"hung"`
	// StateFile is set while the agent cannot write its state file (a
	// full or failing state dir): it enforces deadlines from memory, but
	// a restart would lose every change since StateFile.Since.
	StateFile *StateFileError `json:"state_file_error,omitempty"`
}

// StateFileError is a streak of failed writes of the agent's state file.
type StateFileError struct {
	Path     string    `json:"path"`
	Error    string    `json:"error"` // the latest failure
	Since    time.Time `json:"since"` // the first failure of the streak
	Failures int       `json:"failures"`
}

// Service is what the server needs from the supervisor. Every method may be
// called concurrently; none holds the supervisor's state across a call.
type Service interface {
	// StartJob registers a job. It fails with request.ErrDuplicateJob or an
	// *request.InputError, and then changes nothing.
	StartJob(ctx context.Context, req request.JobStartRequest) (Job, error)
	// EndJob records T_end=now for a running job and starts its teardown
	// (or for an overdue job whose end was never reported).
	EndJob(ctx context.Context, id string) (Job, error)
	// UpdateJob changes the expiration or adds the cgroup of a job that is
	// running or tearing down. It fails with request.ErrUnknownJob, request.ErrConflict
	// (released, overdue, another cgroup) or an *request.InputError, and then
	// changes nothing.
	UpdateJob(ctx context.Context, id string, req request.JobUpdateRequest) (Job, error)
	// RunEpilog runs an epilogue for the job (registering it with E=now if
	// unknown, ending it if running), streams its output to out and blocks
	// until it exits, returning its status (128+signal if killed). If ctx ends
	// first it returns ctx.Err() and the epilogue goes on under supervision.
	RunEpilog(ctx context.Context, id string, req request.EpilogRequest, out request.OutputSink) (int, error)
	// Status returns the node's state.
	Status(ctx context.Context) (Status, error)
	// Diagnose returns the latest report of every job (job == "") or of one
	// job, taking a fresh snapshot of a job that is still tearing down.
	Diagnose(ctx context.Context, job string) ([]*report.Report, error)
	// Resume clears the DOWN latch.
	Resume(ctx context.Context, req request.ResumeRequest) (Status, error)
}

// MaxListedProcesses bounds Job.Processes.
const MaxListedProcesses = 64

// ErrorBody is the JSON body of every error response.
type ErrorBody struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}
