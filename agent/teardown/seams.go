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

	"github.com/gracewatch/gracewatch/agent/diagnose"
)

// Cgroups is what the supervisor needs from the cgroup manager
// (agent/cgroup.Manager, adapted in package agent).
type Cgroups interface {
	// Create makes Root/rel and returns its absolute path.
	Create(rel string) (string, error)
	// Resolve turns a foreign cgroup path into an absolute, existing one.
	Resolve(p string) (string, error)
	// Start starts cmd directly inside the owned cgroup at path.
	Start(cmd *exec.Cmd, path string) error
	// Signal sends sig to every process of path's subtree.
	Signal(path string, sig syscall.Signal) (int, error)
	// Kill kills every process of the owned cgroup at path.
	Kill(path string) (int, error)
	// Remove removes the owned cgroup at path and its descendants.
	Remove(path string) error
	// Populated reports whether path's subtree holds a process.
	Populated(path string) (bool, error)
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
