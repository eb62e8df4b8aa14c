// Package teardown is the node agent's supervisor: it registers jobs, runs
// their epilogues in cgroups of their own, enforces the deadline
// D = min(T_end, E) + G, escalates signals, diagnoses what is hung, holds the
// node's DOWN latch, and persists all of it so that a restarted agent
// re-adopts teardowns in progress.
//
// All state is owned by one goroutine (Supervisor.Run); the API methods,
// timers, cgroup events and process exits reach it as events.
package teardown

import (
	"context"
	"os/exec"
	"syscall"
	"time"

	"github.com/gracewatch/gracewatch/agent/diagnose"
)

// Cgroups is what the supervisor needs from the cgroup manager
// (agent/cgroup.Manager, adapted in package agent).
type Cgroups interface {
	// Create makes Root/rel and returns its absolute path.
	Create(rel string) (string, error)
	// Resolve turns a foreign cgroup as the exec system names it (a path,
	// or the /proc/PID/cgroup form) into one the agent may observe: its
	// errors say what is wrong with it, and refuse a cgroup outside the
	// configured allow-list ([teardown] foreign_cgroups).
	Resolve(spec string) (Foreign, error)
	// Start starts cmd directly inside the owned cgroup at path.
	Start(cmd *exec.Cmd, path string) error
	// Signal sends sig to every process of path's subtree.
	Signal(path string, sig syscall.Signal) (int, error)
	// Kill kills every process of the owned cgroup at path.
	Kill(path string) (int, error)
	// Remove removes the owned cgroup at path and its descendants.
	Remove(path string) error
	// Populated reports whether path's subtree holds a process (cgroup v2:
	// cgroup.events).
	Populated(path string) (bool, error)
	// Procs lists up to max pids of a foreign cgroup's subtree: from
	// cgroup.procs files, of a v1 hierarchy when v1 is set. A v1 cgroup has
	// no populated flag: these lists are its only evidence. A cgroup that
	// does not exist has none.
	Procs(path string, v1 bool, max int) ([]int, error)
	// Watch calls fn (which must not block) after every change of path's
	// cgroup.events.
	Watch(path string, fn func()) (cancel func(), err error)
}

// Diagnoser takes snapshots of a job's processes. Snapshot blocks (two
// samples a few seconds apart, /proc reads bounded in time); the supervisor
// calls it off its main loop.
type Diagnoser interface {
	Snapshot(ctx context.Context, req diagnose.Request) *diagnose.Report
}

// ReportStore keeps reports on disk.
type ReportStore interface {
	Save(r *diagnose.Report) (string, error)
	// Latest returns the newest report of job, or nil.
	Latest(job string) (*diagnose.Report, error)
}

// Foreign is an exec system's job cgroup that the supervisor observes
// read-only (and signals only with Options.SignalForeign).
type Foreign struct {
	// Path is its absolute directory.
	Path string
	// V1 is set for a cgroup of a v1 hierarchy: it has no cgroup.events, so
	// it is polled (at most once a second, only while its job is
	// registered and not released) instead of watched.
	V1 bool
	// Name is the /proc/PID/cgroup form ("freezer:/slurm/uid_0/job_5"),
	// for messages.
	Name string
}

// Expirations asks the exec system for a job's current expiration E (the
// site's [teardown] expiration_command): the supervisor calls it, off its
// main loop, just before it would latch DOWN a job whose end was never
// reported, so that a time limit extended in the exec system alone never
// turns into a false DOWN. Expiration returns the exec system's answer as
// text that request.ParseExpiration reads; it blocks, bounded by its own
// timeout and by ctx.
//
// Timeout bounds one call: a teardown's deadline is told as at least that
// long after its question (job.view).
type Expirations interface {
	Expiration(ctx context.Context, job string) (string, error)
	Timeout() time.Duration
}
