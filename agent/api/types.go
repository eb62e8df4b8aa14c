// Package api is the node agent's local API as its clients see it: HTTP/1.1
// over a Unix socket, JSON bodies. It holds the wire types and the client
// used by the CLI, which speaks HTTP itself (transport.go) so that the
// client, started by an exec system for every job, links no server library.
// The server is package agent/api/server.
//
// The wire types here are kept apart from the supervisor's internal state on
// purpose: the socket API is a compatibility promise to exec systems (Flux's
// housekeeping, Slurm's Epilog scripts), the internal types are not.
package api

import (
	"time"
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

// MaxListedProcesses bounds Job.Processes.
const MaxListedProcesses = 64

// ErrorBody is the JSON body of every error response.
type ErrorBody struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}
