package teardown

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/gracewatch/gracewatch/agent/diagnose"
	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/opt"
)

// Auto-resume policies.
const (
	AutoResumeNever     = "never"
	AutoResumeWhenClean = "when-clean"
)

// Escalation steps of an overdue job.
const (
	escNone       = ""
	escTerm       = "term"
	escKill       = "kill"
	escClassified = "classified"
)

var errStopped = errors.New("node agent is shutting down")

// latchWait bounds how long the DOWN latch waits at the deadline for the
// snapshot taken before the first signal (which names what is hung).
const latchWait = 500 * time.Millisecond

// maxReleased bounds how many released jobs are remembered (for status and
// for an epilogue that arrives after its job was released).
const maxReleased = 64

// Options configures a Supervisor.
type Options struct {
	Node     string
	StateDir string
	Clock    clock.Clock
	Cgroups  Cgroups
	// Diagnoser and Reports may be nil (no diagnostics; tests of logic).
	Diagnoser Diagnoser
	Reports   ReportStore
	Logger    *slog.Logger

	Grace           time.Duration
	KillWait        time.Duration
	UnkillableAfter time.Duration
	AutoResume      string
	SignalForeign   bool
	// Observe is observe mode (mode = "observe"): a teardown that passes
	// its deadline is marked overdue and diagnosed as in enforce mode, but
	// nothing is signalled and the node is not latched DOWN for it
	// (escalate.go, observeOverdue).
	Observe          bool
	MaxExpirationAge time.Duration
	// MaxJobs bounds the registered jobs that are not released (0:
	// DefaultMaxJobs).
	MaxJobs int
	// OutputTail is how many bytes of each of an epilogue's streams
	// (stdout, stderr) the state dir keeps, the end of them (0:
	// DefaultOutputTail; see output.go). An attached `nodeagent epilog`
	// receives all of it as it comes.
	OutputTail int64
	// Expirations, if set, is asked for a job's current expiration just
	// before a job whose end was never reported would be made overdue
	// ([teardown] expiration_command).
	Expirations Expirations

	// OnChange, if set, is called on the main loop after every change of the
	// node's status. It must not block.
	OnChange func(Status)
	// OnReport, if set, is called on the main loop with every report of a
	// violating teardown (for the journal, later the mesh). It must not block.
	OnReport func(*diagnose.Report)
	// OnEvent, if set, is called on the main loop with every Event (job
	// registered, deadline missed, escalation, release, epilogue exit): what
	// the agent's metrics count. It must not block.
	OnEvent func(Event)
}

// Supervisor enforces teardown deadlines on one node. Its methods are safe
// for concurrent use; they block until the main loop (Run) has handled them.
type Supervisor struct {
	o         Options
	log       *slog.Logger
	statePath string
	outDir    string
	out       *outputs

	events chan func()
	quit   chan struct{} // closed when Run returns
	kick   chan struct{}
	dirtyM sync.Mutex
	dirty  map[string]bool

	// Owned by the main loop.
	st      *persisted
	jobs    map[string]*job
	status  Status
	ctx     context.Context
	unsaved bool // the state changed since the last write
	// stateErr is the failing streak of state file writes, nil while
	// they succeed; stateErrLogged is when it was last logged and
	// stateRetry the write it will try next (see writeFailed).
	stateErr       *StateFileError
	stateErrLogged time.Time
	stateRetry     clock.Timer
}

// New loads the persisted state from o.StateDir. Run must be called for the
// supervisor to do anything.
func New(o Options) (*Supervisor, error) {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.AutoResume == "" {
		o.AutoResume = AutoResumeNever
	}
	opt.Default(&o.MaxJobs, DefaultMaxJobs)
	opt.Default(&o.OutputTail, DefaultOutputTail)
	if o.MaxExpirationAge == 0 {
		o.MaxExpirationAge = 24 * time.Hour
	}
	if o.Cgroups == nil {
		return nil, errors.New("teardown: no cgroup manager")
	}
	s := &Supervisor{
		o:         o,
		log:       o.Logger.With("component", "teardown"),
		statePath: filepath.Join(o.StateDir, "state.json"),
		outDir:    filepath.Join(o.StateDir, "output"),
		events:    make(chan func(), 256),
		quit:      make(chan struct{}),
		kick:      make(chan struct{}, 1),
		dirty:     make(map[string]bool),
		jobs:      make(map[string]*job),
	}
	for _, d := range []string{o.StateDir, s.outDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("create state dir: %w", err)
		}
	}
	st, err := loadState(s.statePath)
	if err != nil {
		return nil, err
	}
	if s.out, err = newOutputs(o.OutputTail, s.log); err != nil {
		return nil, err
	}
	st.Boots++
	if st.Node == "" {
		st.Node = o.Node
	}
	if st.Since.IsZero() {
		st.Since = o.Clock.Now()
		st.State = StateUp
	}
	s.st = st
	for _, j := range st.Jobs {
		j.adoptName()
		s.jobs[j.ID] = j
	}
	s.status = s.compute()
	return s, nil
}

// Run is the main loop. It re-adopts persisted teardowns, then handles events
// until ctx ends. Epilogues keep running when it returns.
func (s *Supervisor) Run(ctx context.Context) error {
	s.ctx = ctx
	defer close(s.quit)
	trimmed := make(chan struct{})
	go func() { s.out.run(); close(trimmed) }()
	defer s.out.close(trimmed)
	s.out.scan(s.outDir)
	s.readopt()
	s.changed()
	s.flush()
	// Whoever listens hears the starting state even if nothing changed.
	if s.o.OnChange != nil {
		s.o.OnChange(s.status)
	}
	for {
		select {
		case <-ctx.Done():
			for _, j := range s.jobs {
				s.stopRuntime(j)
			}
			if s.stateRetry != nil {
				s.stateRetry.Stop()
			}
			return nil
		case fn := <-s.events:
			// cgroup events that arrived before this event are handled
			// first, so a caller that saw a cgroup empty and then asks for
			// the status sees the release.
			select {
			case <-s.kick:
				s.handleDirty()
			default:
			}
			fn()
		case <-s.kick:
			s.handleDirty()
		}
		s.flush()
	}
}

func (s *Supervisor) handleDirty() {
	s.dirtyM.Lock()
	ids := s.dirty
	s.dirty = make(map[string]bool)
	s.dirtyM.Unlock()
	for id := range ids {
		if j := s.jobs[id]; j != nil {
			s.check(j)
		}
	}
	s.changed()
}

// post queues fn for the main loop. It is used by timers and goroutines;
// after Run has returned, fn is dropped.
func (s *Supervisor) post(fn func()) {
	select {
	case s.events <- fn:
	case <-s.quit:
	}
}

// do runs fn on the main loop and waits for it.
func (s *Supervisor) do(ctx context.Context, fn func()) error {
	done := make(chan struct{})
	select {
	case s.events <- func() { fn(); s.flush(); close(done) }:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.quit:
		return errStopped
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.quit:
		return errStopped
	}
}

// markDirty is the cgroup watch callback: it must not block.
func (s *Supervisor) markDirty(id string) {
	s.dirtyM.Lock()
	s.dirty[id] = true
	s.dirtyM.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// armAt schedules fn on the main loop at the wall-clock instant t (at
// once if t has passed), replacing the job's previous timer. It is for the
// instants agreed with the exec system and the aggregators, E and
// D = min(T_end, E) + G: clock.At fires neither early nor late when the
// wall clock is stepped (NTP) in between.
func (s *Supervisor) armAt(j *job, t time.Time, fn func()) {
	if j.timer != nil {
		j.timer.Stop()
	}
	j.timer = clock.At(s.o.Clock, t, func() { s.post(func() { fn(); s.changed() }) })
}

// armAfter schedules fn on the main loop after d of elapsed (monotonic)
// time, replacing the job's previous timer. It is for the waits the agent
// alone counts, which a step of the wall clock must neither stretch nor
// shrink: kill_wait after SIGTERM, unkillable_after after SIGKILL, the
// recheck of survivors.
func (s *Supervisor) armAfter(j *job, d time.Duration, fn func()) {
	if j.timer != nil {
		j.timer.Stop()
	}
	j.timer = s.o.Clock.AfterFunc(d, func() { s.post(func() { fn(); s.changed() }) })
}

// leftOf is what remains of a wait of step that began at the wall-clock
// instant from (a persisted TERM or KILL), for an escalation re-adopted
// after a restart: the wall clock is all a restart has, so the remainder
// is bounded to [0, step] in case it was stepped meanwhile.
func (s *Supervisor) leftOf(from time.Time, step time.Duration) time.Duration {
	return min(max(from.Add(step).Sub(s.o.Clock.Now().Round(0)), 0), step)
}

// stopTimers stops j's deadline, expiration and poll timers.
func (s *Supervisor) stopTimers(j *job) {
	for _, t := range []*clock.Timer{&j.timer, &j.atE, &j.poll} {
		if *t != nil {
			(*t).Stop()
			*t = nil
		}
	}
}

func (s *Supervisor) stopRuntime(j *job) {
	s.stopTimers(j)
	for _, c := range j.cancels {
		c()
	}
	j.cancels = nil
}

// compute derives the node status from the jobs and the latch. A job still
// running after its expiration E is being torn down whether the exec
// system says so or not: the node is free at its deadline E + G at the
// latest (or DOWN), and is served so.
func (s *Supervisor) compute() Status {
	st := Status{Node: s.o.Node, State: StateUp, Seq: s.st.Seq, Incarnation: s.st.Boots, Since: s.st.Since,
		Jobs: []Job{}, Hung: []Hung{}, Observe: s.o.Observe}
	var freeAt time.Time
	ids := make([]string, 0, len(s.jobs))
	for id := range s.jobs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	tearing := false
	now := s.o.Clock.Now()
	for _, id := range ids {
		j := s.jobs[id]
		st.Jobs = append(st.Jobs, j.view())
		if j.Phase == PhaseTeardown || (j.Phase == PhaseOverdue && !j.Acknowledged) || j.pastExpiration(now) {
			tearing = true
			// D, not Job.Held: free_at is the scheduler's plan, and
			// D the best word on when the node is free.
			if j.Deadline.After(freeAt) {
				freeAt = j.Deadline
			}
		}
		if j.Phase == PhaseOverdue && j.Observed {
			st.Observed = append(st.Observed, j.ID)
		}
		if j.Phase == PhaseOverdue && j.lastReport != nil {
			for _, p := range j.lastReport.Processes {
				st.Hung = append(st.Hung, Hung{Job: j.ID, PID: p.PID, Comm: p.Comm, Class: string(p.Class), State: p.State, Wchan: p.Wchan})
			}
		}
	}
	if e := s.stateErr; e != nil {
		c := *e
		st.StateFile = &c
	}
	if len(st.Observed) > 0 {
		st.ObservedCause = s.observedCause()
	}
	switch {
	case s.st.Latch.Down:
		st.State = StateDown
		st.Reason = s.st.Latch.Reason
		st.Cause, st.Clean = s.latchCause()
		st.AdminDrain = s.st.Latch.Kind == "drain"
	case tearing:
		st.State = StateTeardown
		st.FreeAt = freeAt
	}
	return st
}

// changed recomputes the status; on a change of state, reason or free_at it
// bumps the sequence, persists and notifies.
func (s *Supervisor) changed() {
	next := s.compute()
	prev := s.status
	same := next.State == prev.State && next.Reason == prev.Reason && next.FreeAt.Equal(prev.FreeAt)
	if same && jobsEqual(next.Jobs, prev.Jobs) && len(next.Hung) == len(prev.Hung) && next.Clean == prev.Clean &&
		next.AdminDrain == prev.AdminDrain && reflect.DeepEqual(next.Cause, prev.Cause) &&
		slices.Equal(next.Observed, prev.Observed) && reflect.DeepEqual(next.ObservedCause, prev.ObservedCause) {
		return
	}
	if next.State != prev.State {
		s.st.Since = s.o.Clock.Now()
		s.log.Info("node state", "state", next.State, "reason", next.Reason, "free_at", next.FreeAt)
	}
	s.st.Seq++
	s.st.State = next.State
	s.st.Reason = next.Reason
	next.Seq = s.st.Seq
	next.Since = s.st.Since
	s.status = next
	s.persist()
	if s.o.OnChange != nil {
		s.o.OnChange(next)
	}
}

func jobsEqual(a, b []Job) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || a[i].Phase != b[i].Phase || a[i].Escalation != b[i].Escalation || a[i].Epilogs != b[i].Epilogs ||
			a[i].Outcome != b[i].Outcome || !a[i].Deadline.Equal(b[i].Deadline) || !a[i].Held.Equal(b[i].Held) || !a[i].Expiration.Equal(b[i].Expiration) ||
			a[i].ForeignName != b[i].ForeignName || a[i].User != b[i].User || a[i].Command != b[i].Command {
			return false
		}
	}
	return true
}
