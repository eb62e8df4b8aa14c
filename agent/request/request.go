// Package request is what a request to the node agent may hold, wherever it
// comes from (the socket API, the mesh, the aggregator's job registration):
// the request types, the rules that check their fields (job ids, reasons,
// cgroups, expirations, grace periods, Flux's R), the caller's identity, and
// the errors a request can get.
//
// It is a leaf package (the standard library only), so that the light
// client (cmd/nodeagent) and the aggregator can check a request the way the
// agent will without linking the agent's kernel code; agent/api carries
// these types on the wire and agent/teardown acts on them.
package request

import (
	"context"
	"errors"
	"fmt"
)

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
	// User is the job's user (ValidateUser), for the reports and the
	// cluster's teardown history; a bad one is dropped, not the
	// registration (CheckUser).
	User string `json:"user,omitempty"`
	// PlanGrace is the G the scheduler plans the job with (Flux: the
	// gracewatch jobtap plugin's record, `nodeagent job start --eventlog`),
	// as Grace; empty: not known. One that is not the job's G is logged
	// and counted (gracewatch_agent_grace_mismatches_total): the node
	// would be drained at another time than the plan says it is free.
	PlanGrace string `json:"plan_grace,omitempty"`
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
	// User is the job's user (as in JobStartRequest), for a job registered
	// without one (Slurm's controller registers a job before the node's
	// Prolog names its user).
	User string `json:"user,omitempty"`
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
	// User, optional, is the job's user (as in JobStartRequest), for a job
	// registered without one.
	User string `json:"user,omitempty"`
}

// ResumeRequest is the body of POST /v1/resume.
type ResumeRequest struct {
	Reason string `json:"reason"`
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

// Sentinel errors of a request to the agent; the server maps them to HTTP statuses.
var (
	ErrUnknownJob   = errors.New("unknown job")              // 404
	ErrDuplicateJob = errors.New("job already registered")   // 409
	ErrConflict     = errors.New("conflict")                 // 409
	ErrForbidden    = errors.New("forbidden")                // 403
	ErrFull         = errors.New("too many jobs registered") // 503
)

// InputError is a request field that is wrong (HTTP 400).
type InputError struct {
	Field string
	Msg   string
}

func (e *InputError) Error() string { return fmt.Sprintf("%s: %s", e.Field, e.Msg) }
