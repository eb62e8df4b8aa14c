package teardown

import "time"

// EventKind says what happened in an Event.
type EventKind string

// Event kinds.
const (
	// EventRegistered: a job was registered (job start, or an epilogue for
	// an unknown job).
	EventRegistered EventKind = "registered"
	// EventOverdue: a teardown was not done by its deadline D (a grace
	// violation).
	EventOverdue EventKind = "overdue"
	// EventEscalation: an escalation step signalled an overdue teardown;
	// Signal is "SIGTERM" or "SIGKILL". The second SIGKILL pass made before
	// survivors are classified is part of the SIGKILL step and not told.
	EventEscalation EventKind = "escalation"
	// EventReleased: a teardown ended (every process gone, every epilogue
	// reaped); Outcome is clean, exited, terminated, killed or hung and
	// Duration is the time from min(T_end, E) to the release (job.duration):
	// over G means overdue for a grace G.
	EventReleased EventKind = "released"
	// EventEpilogExited: an epilogue this process started was reaped;
	// Status is its exit code, or 128+N with Signaled when signal N killed
	// it. Epilogues re-adopted after a restart are not this process's
	// children and are not told.
	EventEpilogExited EventKind = "epilog-exited"
	// EventEpilogStartError: an epilogue could not be started (its cgroup,
	// its output files, or the exec failed); Err says why.
	EventEpilogStartError EventKind = "epilog-start-error"
	// EventStateWriteError: the state file could not be written (a full
	// or read-only state dir); Err says why. The agent goes on from memory,
	// but a restart would lose what was not written.
	EventStateWriteError EventKind = "state-write-error"
	// EventStateWriteRecovered: the state file was written after a streak
	// of EventStateWriteError.
	EventStateWriteRecovered EventKind = "state-write-recovered"
	// EventGraceMismatch: a job was registered whose scheduler plans with
	// another G than the job's (request.JobStartRequest.PlanGrace).
	EventGraceMismatch EventKind = "grace-mismatch"
)

// Event is one thing that happened on the supervisor's main loop, for
// counters such as the agent's metrics: the status (Options.OnChange) tells
// where the node is, events tell what happened on the way, including what
// a status between two notifications would not show. Events are told once,
// by the process in which they happened; nothing is replayed after a
// restart.
type Event struct {
	Kind EventKind
	// Job is the job's id.
	Job string
	// Signal is set for EventEscalation.
	Signal string
	// Observed is set for EventOverdue in observe mode: nothing was
	// signalled or latched.
	Observed bool
	// Outcome and Duration are set for EventReleased.
	Outcome  string
	Duration time.Duration
	// Status and Signaled are set for EventEpilogExited.
	Status   int
	Signaled bool
	// Err is set for EventEpilogStartError and EventStateWriteError.
	Err error
}

// emit tells ev to Options.OnEvent, if set. It runs on the main loop.
func (s *Supervisor) emit(ev Event) {
	if s.o.OnEvent != nil {
		s.o.OnEvent(ev)
	}
}
