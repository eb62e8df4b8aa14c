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
	"errors"
	"fmt"
	"time"

	"github.com/gracewatch/gracewatch/agent/diagnose"
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

// JobStartRequest is the body of POST /v1/jobs.
type JobStartRequest struct {
	// Job is the exec system's job id (1 to 128 printable bytes, no '/').
	Job string `json:"job"`
	// Expiration is E: RFC 3339, or Unix seconds (fractions allowed) as a
	// string; "0" means the job has no expiration.
	Expiration string `json:"expiration"`
	// Grace overrides the agent's default G ("90s"); empty keeps it.
	Grace string `json:"grace,omitempty"`
	// Cgroup is the exec system's own job cgroup (Slurm's, Flux's) to
	// observe read-only: an absolute directory below the cgroup2 mount or a
	// mounted v1 hierarchy, a path relative to the cgroup2 mount, or the
	// form /proc/PID/cgroup prints ("0::/system.slice/x",
	// "freezer:/slurm/uid_0/job_5"). It must match the agent's
	// [teardown] foreign_cgroups.
	Cgroup string `json:"cgroup,omitempty"`
}

// JobUpdateRequest is the body of POST /v1/jobs/{id}/update: what the exec
// system changed about a registered job that is not released and not
// overdue. At least one field is set.
type JobUpdateRequest struct {
	// Expiration is the job's new E (as in JobStartRequest; "0" removes
	// it): its time limit was extended or shortened. It may not lie before
	// now.
	Expiration string `json:"expiration,omitempty"`
	// Cgroup is the job's cgroup (as in JobStartRequest), for a job
	// registered without one.
	Cgroup string `json:"cgroup,omitempty"`
}

// EpilogRequest is the body of POST /v1/jobs/{id}/epilog.
type EpilogRequest struct {
	// Argv is the command and its arguments; Argv[0] is looked up in PATH of
	// Env when it has no slash.
	Argv []string `json:"argv"`
	// Env is the environment of the command ("K=V").
	Env []string `json:"env,omitempty"`
	// Dir is the working directory; empty means "/".
	Dir string `json:"dir,omitempty"`
	// Cgroup, optional, is the job's own cgroup (as in JobStartRequest),
	// observed as the teardown goes on, for a job registered without one.
	Cgroup string `json:"cgroup,omitempty"`
}

// Frame is one line of the newline-delimited JSON stream answering an epilog
// request. Data is base64 in JSON. The last frame has Stream "exit" (with
// Status) or "error" (with Error).
type Frame struct {
	Stream string `json:"stream"` // stdout, stderr, exit, error
	Data   []byte `json:"data,omitempty"`
	Status *int   `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
}

// ResumeRequest is the body of POST /v1/resume.
type ResumeRequest struct {
	Reason string `json:"reason"`
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

// Peer is the SO_PEERCRED identity of a client connection.
type Peer struct {
	PID    int32
	UID    uint32
	GID    uint32
	Groups []uint32 // supplementary groups, from /proc/PID/status
}

type peerKey struct{}

// WithPeer returns ctx carrying p.
func WithPeer(ctx context.Context, p Peer) context.Context {
	return context.WithValue(ctx, peerKey{}, p)
}

// PeerFrom returns the peer stored by the server, if any.
func PeerFrom(ctx context.Context) (Peer, bool) {
	p, ok := ctx.Value(peerKey{}).(Peer)
	return p, ok
}

// OutputSink receives an epilogue's output as it is produced. Calls come from
// one goroutine at a time; a write error means the client is gone and the
// service must keep supervising regardless.
type OutputSink interface {
	Stdout(p []byte) error
	Stderr(p []byte) error
}

// Service is what the server needs from the supervisor. Every method may be
// called concurrently; none holds the supervisor's state across a call.
type Service interface {
	// StartJob registers a job. It fails with ErrDuplicateJob or an
	// *InputError, and then changes nothing.
	StartJob(ctx context.Context, req JobStartRequest) (Job, error)
	// EndJob records T_end=now for a running job and starts its teardown
	// (or for an overdue job whose end was never reported).
	EndJob(ctx context.Context, id string) (Job, error)
	// UpdateJob changes the expiration or adds the cgroup of a job that is
	// running or tearing down. It fails with ErrUnknownJob, ErrConflict
	// (released, overdue, another cgroup) or an *InputError, and then
	// changes nothing.
	UpdateJob(ctx context.Context, id string, req JobUpdateRequest) (Job, error)
	// RunEpilog runs an epilogue for the job (registering it with E=now if
	// unknown, ending it if running), streams its output to out and blocks
	// until it exits, returning its status (128+signal if killed). If ctx ends
	// first it returns ctx.Err() and the epilogue goes on under supervision.
	RunEpilog(ctx context.Context, id string, req EpilogRequest, out OutputSink) (int, error)
	// Status returns the node's state.
	Status(ctx context.Context) (Status, error)
	// Diagnose returns the latest report of every job (job == "") or of one
	// job, taking a fresh snapshot of a job that is still tearing down.
	Diagnose(ctx context.Context, job string) ([]*diagnose.Report, error)
	// Resume clears the DOWN latch.
	Resume(ctx context.Context, req ResumeRequest) (Status, error)
}

// Sentinel errors of the Service; the server maps them to HTTP statuses.
var (
	ErrUnknownJob   = errors.New("unknown job")              // 404
	ErrDuplicateJob = errors.New("job already registered")   // 409
	ErrConflict     = errors.New("conflict")                 // 409
	ErrForbidden    = errors.New("forbidden")                // 403
	ErrFull         = errors.New("too many jobs registered") // 503
)

// MaxListedProcesses bounds Job.Processes.
const MaxListedProcesses = 64

// InputError is a request field that is wrong (HTTP 400).
type InputError struct {
	Field string
	Msg   string
}

func (e *InputError) Error() string { return fmt.Sprintf("%s: %s", e.Field, e.Msg) }

// ErrorBody is the JSON body of every error response.
type ErrorBody struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}
