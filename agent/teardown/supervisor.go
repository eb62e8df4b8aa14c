package teardown

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/agent/diagnose"
	"github.com/gracewatch/gracewatch/internal/clock"
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

	Grace            time.Duration
	KillWait         time.Duration
	UnkillableAfter  time.Duration
	AutoResume       string
	SignalForeign    bool
	MaxExpirationAge time.Duration

	// OnChange, if set, is called on the main loop after every change of the
	// node's status. It must not block.
	OnChange func(api.Status)
	// OnReport, if set, is called on the main loop with every report of a
	// violating teardown (for the journal, later the mesh). It must not block.
	OnReport func(*diagnose.Report)
	// OnEvent, if set, is called on the main loop with every Event (job
	// registered, deadline missed, escalation, release, epilogue exit): what
	// the agent's metrics count. It must not block.
	OnEvent func(Event)
}

// job is the supervisor's record of one job. Exported fields are persisted.
type job struct {
	ID           string        `json:"id"`
	Expiration   time.Time     `json:"expiration,omitzero"`
	NoExpiration bool          `json:"no_expiration,omitempty"`
	Grace        time.Duration `json:"grace"`
	Registered   time.Time     `json:"registered"`
	Ended        time.Time     `json:"ended,omitzero"`
	Deadline     time.Time     `json:"deadline,omitzero"`
	Phase        string        `json:"phase"`
	Cgroup       string        `json:"cgroup,omitempty"`
	Foreign      string        `json:"foreign,omitempty"`
	Epilogs      int           `json:"epilogs"`
	EpilogPIDs   []int         `json:"epilog_pids,omitempty"`
	Escalation   string        `json:"escalation,omitempty"`
	Term         time.Time     `json:"term,omitzero"`
	Kill         time.Time     `json:"kill,omitzero"`
	Violated     bool          `json:"violated,omitempty"`
	Acknowledged bool          `json:"acknowledged,omitempty"` // overdue, but an admin resumed the node
	Latched      bool          `json:"latched,omitempty"`      // this violation latched the node DOWN
	Outcome      string        `json:"outcome,omitempty"`
	Released     time.Time     `json:"released,omitzero"`
	Report       string        `json:"report,omitempty"` // path of the latest saved report
	Summary      string        `json:"summary,omitempty"`

	// Runtime only.
	children    map[int]chan int // epilogue pid → receives its exit status
	timer       clock.Timer
	cancels     []func()
	lastReport  *diagnose.Report
	snapshotRun bool
}

func (j *job) active() bool { return j.Phase == api.PhaseTeardown || j.Phase == api.PhaseOverdue }

// Supervisor enforces teardown deadlines on one node. Its methods are safe
// for concurrent use; they block until the main loop (Run) has handled them.
type Supervisor struct {
	o         Options
	log       *slog.Logger
	statePath string
	outDir    string

	events chan func()
	quit   chan struct{} // closed when Run returns
	kick   chan struct{}
	dirtyM sync.Mutex
	dirty  map[string]bool

	// Owned by the main loop.
	st      *persisted
	jobs    map[string]*job
	status  api.Status
	ctx     context.Context
	unsaved bool // the state changed since the last write
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
	st.Boots++
	if st.Node == "" {
		st.Node = o.Node
	}
	if st.Since.IsZero() {
		st.Since = o.Clock.Now()
		st.State = api.StateUp
	}
	s.st = st
	for _, j := range st.Jobs {
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

// readopt re-arms watches and timers of persisted jobs after a restart.
func (s *Supervisor) readopt() {
	for _, j := range s.jobs {
		if !j.active() && j.Phase != api.PhaseRunning {
			continue
		}
		s.watch(j)
		if !j.active() {
			continue
		}
		if s.o.Reports != nil {
			if r, err := s.o.Reports.Latest(j.ID); err == nil && r != nil {
				j.lastReport = r
			}
		}
		s.log.Info("re-adopted teardown", "job", j.ID, "phase", j.Phase, "deadline", j.Deadline, "escalation", j.Escalation)
		switch {
		case j.Phase == api.PhaseTeardown:
			s.armAt(j, j.Deadline, func() { s.overdue(j) })
		case j.Escalation == escNone:
			s.latchJob(j)
			s.escalateTerm(j)
		case j.Escalation == escTerm:
			s.armAt(j, j.Term.Add(s.o.KillWait), func() { s.escalateKill(j) })
		case j.Escalation == escKill:
			s.armAt(j, j.Kill.Add(s.o.UnkillableAfter), func() { s.classify(j) })
		}
		s.check(j)
	}
}

// armAt schedules fn on the main loop at t (at once if t has passed),
// replacing the job's previous timer.
func (s *Supervisor) armAt(j *job, t time.Time, fn func()) {
	if j.timer != nil {
		j.timer.Stop()
	}
	d := t.Sub(s.o.Clock.Now())
	j.timer = s.o.Clock.AfterFunc(d, func() { s.post(func() { fn(); s.changed() }) })
}

func (s *Supervisor) stopRuntime(j *job) {
	if j.timer != nil {
		j.timer.Stop()
		j.timer = nil
	}
	for _, c := range j.cancels {
		c()
	}
	j.cancels = nil
}

// watch subscribes to the job's cgroups.
func (s *Supervisor) watch(j *job) {
	if len(j.cancels) > 0 {
		return
	}
	id := j.ID
	for _, p := range []string{j.Cgroup, j.Foreign} {
		if p == "" {
			continue
		}
		cancel, err := s.o.Cgroups.Watch(p, func() { s.markDirty(id) })
		if err != nil {
			s.log.Warn("cannot watch cgroup", "job", id, "cgroup", p, "err", err)
			continue
		}
		j.cancels = append(j.cancels, cancel)
	}
}

// populated reports whether any supervised cgroup of j holds a process. An
// unreadable cgroup counts as populated: only populated 0 is proof.
func (s *Supervisor) populated(j *job) bool {
	for _, p := range []string{j.Cgroup, j.Foreign} {
		if p == "" {
			continue
		}
		pop, err := s.o.Cgroups.Populated(p)
		if err != nil {
			s.log.Warn("cannot read cgroup events", "job", j.ID, "cgroup", p, "err", err)
			return true
		}
		if pop {
			return true
		}
	}
	return false
}

// check releases j when its teardown is done: every epilogue reaped by Wait
// and every supervised cgroup at populated 0.
func (s *Supervisor) check(j *job) {
	if !j.active() || len(j.children) > 0 || s.populated(j) {
		return
	}
	s.release(j)
}

// startTeardown records T_end and arms the deadline.
func (s *Supervisor) startTeardown(j *job, now time.Time) {
	j.Ended = now
	base := now
	if !j.NoExpiration && j.Expiration.Before(base) {
		base = j.Expiration
	}
	j.Deadline = base.Add(j.Grace)
	j.Phase = api.PhaseTeardown
	s.log.Info("teardown started", "job", j.ID, "deadline", j.Deadline, "grace", j.Grace)
	s.watch(j)
	s.armAt(j, j.Deadline, func() { s.overdue(j) })
}

// reopen puts a released job back into teardown with its original deadline
// (an epilogue that arrived after the job looked done).
func (s *Supervisor) reopen(j *job) {
	j.Phase = api.PhaseTeardown
	j.Released = time.Time{}
	j.Outcome = ""
	s.watch(j)
	// A deadline already past fires at once, after the new epilogue started.
	s.armAt(j, j.Deadline, func() { s.overdue(j) })
}

// overdue handles the deadline: latch the node DOWN, snapshot, then SIGTERM.
func (s *Supervisor) overdue(j *job) {
	if j.Phase != api.PhaseTeardown {
		return
	}
	if len(j.children) == 0 && !s.populated(j) {
		s.release(j)
		return
	}
	j.Phase = api.PhaseOverdue
	j.Violated = true
	j.Summary = fmt.Sprintf("job %s teardown exceeded grace %v", j.ID, j.Grace)
	s.log.Warn("grace violated", "job", j.ID, "deadline", j.Deadline, "cgroup", j.Cgroup, "foreign", j.Foreign)
	s.emit(Event{Kind: EventOverdue, Job: j.ID})
	s.persist()
	// The node is latched DOWN as soon as the snapshot before the first
	// signal is in, so the DOWN everyone sees first already names what is
	// hung; a snapshot slower than latchWait (its /proc reads are bounded,
	// but may block) does not delay the DOWN beyond it. The snapshot is a
	// single sample, so SIGTERM is not delayed by the sampling interval.
	t := s.o.Clock.AfterFunc(latchWait, func() { s.post(func() { s.latchJob(j); s.changed() }) })
	s.snapshot(j, diagnose.StageBeforeSignal, true, func() {
		t.Stop()
		s.latchJob(j)
		s.escalateTerm(j)
	})
}

// latchJob latches the node DOWN for overdue job j, once.
func (s *Supervisor) latchJob(j *job) {
	if j.Latched || j.Acknowledged || j.Phase != api.PhaseOverdue {
		return
	}
	j.Latched = true
	s.latchDown("grace", j.Summary, j.ID)
	s.persist()
}

func (s *Supervisor) escalateTerm(j *job) {
	if j.Phase != api.PhaseOverdue || j.Escalation != escNone {
		return
	}
	j.Escalation = escTerm
	j.Term = s.o.Clock.Now()
	n := s.signal(j, syscall.SIGTERM)
	s.log.Warn("escalation", "job", j.ID, "signal", "SIGTERM", "processes", n)
	s.emit(Event{Kind: EventEscalation, Job: j.ID, Signal: "SIGTERM"})
	s.persist()
	s.armAt(j, j.Term.Add(s.o.KillWait), func() { s.escalateKill(j) })
}

func (s *Supervisor) escalateKill(j *job) {
	if j.Phase != api.PhaseOverdue || j.Escalation != escTerm {
		return
	}
	j.Escalation = escKill
	j.Kill = s.o.Clock.Now()
	n := 0
	if j.Cgroup != "" {
		k, err := s.o.Cgroups.Kill(j.Cgroup)
		if err != nil {
			s.log.Error("kill failed", "job", j.ID, "cgroup", j.Cgroup, "err", err)
		}
		n += k
	}
	if j.Foreign != "" && s.o.SignalForeign {
		k, err := s.o.Cgroups.Signal(j.Foreign, syscall.SIGKILL)
		if err != nil {
			s.log.Error("kill failed", "job", j.ID, "cgroup", j.Foreign, "err", err)
		}
		n += k
	}
	s.log.Warn("escalation", "job", j.ID, "signal", "SIGKILL", "processes", n)
	s.emit(Event{Kind: EventEscalation, Job: j.ID, Signal: "SIGKILL"})
	s.persist()
	s.armAt(j, j.Kill.Add(s.o.UnkillableAfter), func() { s.classify(j) })
}

func (s *Supervisor) classify(j *job) {
	if j.Phase != api.PhaseOverdue || j.Escalation != escKill {
		return
	}
	j.Escalation = escClassified
	// A second SIGKILL pass first: a process the first pass missed (forked
	// meanwhile, or listed late) is "missed", and kill(2) is its remedy.
	if j.Cgroup != "" {
		if _, err := s.o.Cgroups.Kill(j.Cgroup); err != nil {
			s.log.Error("kill failed", "job", j.ID, "cgroup", j.Cgroup, "err", err)
		}
	}
	s.persist()
	s.snapshot(j, diagnose.StageAfterEscalation, false, nil)
}

func (s *Supervisor) signal(j *job, sig syscall.Signal) int {
	n := 0
	for _, p := range []string{j.Cgroup, j.Foreign} {
		if p == "" || (p == j.Foreign && !s.o.SignalForeign) {
			continue
		}
		k, err := s.o.Cgroups.Signal(p, sig)
		if err != nil {
			s.log.Error("signal failed", "job", j.ID, "cgroup", p, "signal", sig.String(), "err", err)
		}
		n += k
	}
	return n
}

// request builds a diagnostics request for j.
func (s *Supervisor) request(j *job, stage string, single bool) diagnose.Request {
	tl := diagnose.Timeline{TeardownStart: j.Ended, Deadline: j.Deadline}
	if !j.Term.IsZero() {
		t := j.Term
		tl.Term = &t
	}
	if !j.Kill.IsZero() {
		t := j.Kill
		tl.Kill = &t
	}
	req := diagnose.Request{Job: j.ID, Grace: j.Grace, Stage: stage, Timeline: tl, SingleSample: single}
	if j.Cgroup != "" {
		req.Cgroups = append(req.Cgroups, diagnose.CgroupRef{Path: j.Cgroup, Owned: true})
	}
	if j.Foreign != "" {
		req.Cgroups = append(req.Cgroups, diagnose.CgroupRef{Path: j.Foreign})
	}
	return req
}

// snapshot takes a report off the main loop and, back on it, stores it, folds
// its summary into the reason and runs then (if set). then runs even when
// there is no diagnoser.
func (s *Supervisor) snapshot(j *job, stage string, single bool, then func()) {
	if s.o.Diagnoser == nil {
		if then != nil {
			then()
		}
		return
	}
	req := s.request(j, stage, single)
	j.snapshotRun = true
	ctx := s.ctx
	go func() {
		r := s.o.Diagnoser.Snapshot(ctx, req)
		s.post(func() {
			j.snapshotRun = false
			if r != nil {
				r.Outcome = diagnose.OutcomePending
				if stage == diagnose.StageAfterEscalation {
					r.Outcome = diagnose.OutcomeHung
					j.Outcome = diagnose.OutcomeHung
				}
				s.adoptReport(j, r)
			}
			if then != nil {
				then()
			}
			s.changed()
		})
	}()
}

// adoptReport keeps r as j's latest report, saves it, and updates the reason.
func (s *Supervisor) adoptReport(j *job, r *diagnose.Report) {
	r.Node = s.o.Node
	r.Summary = diagnose.Summarize(r)
	if r.Stage != diagnose.StageOnDemand {
		r.Suggestions = diagnose.Suggest(r)
	}
	j.lastReport = r
	if s.o.Reports != nil {
		path, err := s.o.Reports.Save(r)
		if err != nil {
			s.log.Error("cannot save report", "job", j.ID, "err", err)
		} else {
			j.Report = path
		}
	}
	if !j.Violated {
		return
	}
	j.Summary = r.Summary
	attrs := []any{"job", j.ID, "stage", r.Stage, "outcome", r.Outcome, "report", j.Report, "summary", r.Summary}
	for _, a := range diagnose.LogAttrs(r) {
		attrs = append(attrs, a)
	}
	s.log.Warn("teardown diagnosis", attrs...)
	if s.o.OnReport != nil {
		s.o.OnReport(r)
	}
	s.refreshReason()
	s.persist()
}

// release ends j's teardown: every process is gone.
func (s *Supervisor) release(j *job) {
	now := s.o.Clock.Now()
	wasOverdue := j.Phase == api.PhaseOverdue
	if wasOverdue {
		// Gone while the latch waited for the first snapshot: the grace
		// was still exceeded.
		s.latchJob(j)
	}
	j.Phase = api.PhaseReleased
	j.Released = now
	if j.timer != nil {
		j.timer.Stop()
		j.timer = nil
	}
	switch {
	case !wasOverdue && !j.Violated:
		j.Outcome = "clean"
	case j.Escalation == escClassified || j.Outcome == diagnose.OutcomeHung:
		j.Outcome = diagnose.OutcomeHung
	case j.Escalation == escKill:
		j.Outcome = diagnose.OutcomeKilled
	case j.Escalation == escTerm:
		j.Outcome = diagnose.OutcomeTerminated
	default:
		j.Outcome = "exited" // went away by itself after the deadline, before any signal
	}
	for _, c := range j.cancels {
		c()
	}
	j.cancels = nil
	if j.Cgroup != "" {
		if err := s.o.Cgroups.Remove(j.Cgroup); err != nil {
			s.log.Warn("cannot remove job cgroup", "job", j.ID, "cgroup", j.Cgroup, "err", err)
		} else {
			j.Cgroup = ""
		}
	}
	os.RemoveAll(s.jobOutDir(j.ID))
	s.log.Info("teardown released", "job", j.ID, "outcome", j.Outcome, "after_end", now.Sub(j.Ended).Round(time.Millisecond))
	s.emit(Event{Kind: EventReleased, Job: j.ID, Outcome: j.Outcome, Duration: now.Sub(j.Ended)})
	if j.Violated {
		if r := j.lastReport; r != nil {
			r.Outcome = j.Outcome
			t := now
			r.Timeline.Released = &t
			if !j.Term.IsZero() {
				tt := j.Term
				r.Timeline.Term = &tt
			}
			if !j.Kill.IsZero() {
				kt := j.Kill
				r.Timeline.Kill = &kt
			}
			if s.o.Reports != nil {
				if path, err := s.o.Reports.Save(r); err == nil {
					j.Report = path
				}
			}
		}
		s.refreshReason()
		s.maybeAutoResume()
	}
	s.pruneReleased()
	s.persist()
}

// latchDown latches the node DOWN for a violation of job id.
func (s *Supervisor) latchDown(kind, reason, id string) {
	l := &s.st.Latch
	if !l.Down {
		l.Down = true
		l.Kind = kind
		l.Since = s.o.Clock.Now()
		l.Reason = reason
	}
	if id != "" && !slices.Contains(l.Jobs, id) {
		l.Jobs = append(l.Jobs, id)
	}
	s.refreshReason()
}

// refreshReason rebuilds the latch reason from the violating jobs' summaries.
func (s *Supervisor) refreshReason() {
	l := &s.st.Latch
	if !l.Down || l.Kind != "grace" {
		return
	}
	var parts []string
	for _, id := range l.Jobs {
		j := s.jobs[id]
		if j == nil {
			continue
		}
		p := j.Summary
		switch j.Outcome {
		case diagnose.OutcomeTerminated:
			p += "; terminated by SIGTERM"
		case diagnose.OutcomeKilled:
			p += "; killed by SIGKILL"
		case "exited":
			p += "; exited after the deadline"
		}
		parts = append(parts, p)
	}
	if len(parts) > 0 {
		l.Reason = strings.Join(parts, " | ")
	}
	const maxReason = 1024
	if len(l.Reason) > maxReason {
		l.Reason = l.Reason[:maxReason-3] + "..."
	}
}

// maybeAutoResume clears a grace latch once every violating job is released,
// when the site allows it.
func (s *Supervisor) maybeAutoResume() {
	l := &s.st.Latch
	if s.o.AutoResume != AutoResumeWhenClean || !l.Down || l.Kind != "grace" {
		return
	}
	for _, id := range l.Jobs {
		if j := s.jobs[id]; j != nil && j.Phase != api.PhaseReleased {
			return
		}
	}
	s.log.Info("node auto-resumed: every process of the violating teardowns is gone", "jobs", l.Jobs, "was", l.Reason)
	s.st.Latch = latch{}
}

func (s *Supervisor) pruneReleased() {
	var rel []*job
	for _, j := range s.jobs {
		if j.Phase == api.PhaseReleased && !slices.Contains(s.st.Latch.Jobs, j.ID) {
			rel = append(rel, j)
		}
	}
	if len(rel) <= maxReleased {
		return
	}
	sort.Slice(rel, func(a, b int) bool { return rel[a].Released.Before(rel[b].Released) })
	for _, j := range rel[:len(rel)-maxReleased] {
		delete(s.jobs, j.ID)
	}
}

// compute derives the node status from the jobs and the latch.
func (s *Supervisor) compute() api.Status {
	st := api.Status{Node: s.o.Node, State: api.StateUp, Seq: s.st.Seq, Incarnation: s.st.Boots, Since: s.st.Since,
		Jobs: []api.Job{}, Hung: []api.Hung{}}
	var freeAt time.Time
	ids := make([]string, 0, len(s.jobs))
	for id := range s.jobs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	tearing := false
	for _, id := range ids {
		j := s.jobs[id]
		st.Jobs = append(st.Jobs, j.wire())
		if j.Phase == api.PhaseTeardown || (j.Phase == api.PhaseOverdue && !j.Acknowledged) {
			tearing = true
			if j.Deadline.After(freeAt) {
				freeAt = j.Deadline
			}
		}
		if j.Phase == api.PhaseOverdue && j.lastReport != nil {
			for _, p := range j.lastReport.Processes {
				st.Hung = append(st.Hung, api.Hung{Job: j.ID, PID: p.PID, Comm: p.Comm, Class: string(p.Class), State: p.State, Wchan: p.Wchan})
			}
		}
	}
	switch {
	case s.st.Latch.Down:
		st.State = api.StateDown
		st.Reason = s.st.Latch.Reason
	case tearing:
		st.State = api.StateTeardown
		st.FreeAt = &freeAt
	}
	return st
}

// changed recomputes the status; on a change of state, reason or free_at it
// bumps the sequence, persists and notifies.
func (s *Supervisor) changed() {
	next := s.compute()
	prev := s.status
	same := next.State == prev.State && next.Reason == prev.Reason && timesEqual(next.FreeAt, prev.FreeAt)
	if same && jobsEqual(next.Jobs, prev.Jobs) && len(next.Hung) == len(prev.Hung) {
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

func timesEqual(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

func jobsEqual(a, b []api.Job) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || a[i].Phase != b[i].Phase || a[i].Escalation != b[i].Escalation || a[i].Epilogs != b[i].Epilogs || a[i].Outcome != b[i].Outcome {
			return false
		}
	}
	return true
}

// persist marks the state for writing at the end of the current event
// (flush), so one event writes the file once however many changes it made.
func (s *Supervisor) persist() { s.unsaved = true }

// flush writes the state file if the current event changed it. API calls
// flush before they answer, so an acknowledged registration is durable.
func (s *Supervisor) flush() {
	if s.unsaved {
		s.unsaved = false
		s.write()
	}
}

// write writes the state file. A failure is logged: the agent goes on
// enforcing deadlines from memory.
func (s *Supervisor) write() {
	s.st.Version = stateVersion
	s.st.Node = s.o.Node
	s.st.Jobs = s.st.Jobs[:0]
	ids := make([]string, 0, len(s.jobs))
	for id := range s.jobs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		s.st.Jobs = append(s.st.Jobs, s.jobs[id])
	}
	// Compact: the file is written after every event, with up to
	// maxReleased released jobs in it; indenting took a third of the
	// encoding, the encoding a quarter of the agent's CPU time in a run
	// of epilogues (perf record), and 0.3-0.5 ms of each epilog.
	data, err := json.Marshal(s.st)
	if err == nil {
		err = writeFileAtomic(s.statePath, data, 0o600)
	}
	if err != nil {
		s.log.Error("cannot persist state", "path", s.statePath, "err", err)
		s.emit(Event{Kind: EventStateWriteError, Err: err})
	}
}

func (j *job) wire() api.Job {
	w := api.Job{ID: j.ID, Phase: j.Phase, Grace: j.Grace.String(), Cgroup: j.Cgroup, Foreign: j.Foreign,
		Epilogs: j.Epilogs, Escalation: j.Escalation, Outcome: j.Outcome}
	if !j.NoExpiration {
		e := j.Expiration
		w.Expiration = &e
	}
	if !j.Ended.IsZero() {
		e, d := j.Ended, j.Deadline
		w.Ended, w.Deadline = &e, &d
	}
	if !j.Released.IsZero() {
		r := j.Released
		w.Released = &r
	}
	return w
}

var safeID = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// cgroupName maps a job id to a cgroup directory name: safe ids are kept,
// others are hex-encoded so no id can escape or collide.
func cgroupName(id string) string {
	if safeID.MatchString(id) && id != "." && id != ".." && len(id) <= 100 {
		return "job-" + id
	}
	return "job-x" + hex.EncodeToString([]byte(id))
}

func (s *Supervisor) jobOutDir(id string) string {
	return filepath.Join(s.outDir, strings.TrimPrefix(cgroupName(id), "job-"))
}

// ---- API (api.Service) ----

var _ api.Service = (*Supervisor)(nil)

// StartJob registers a job (phase running).
func (s *Supervisor) StartJob(ctx context.Context, req api.JobStartRequest) (api.Job, error) {
	if err := api.ValidateJobID(req.Job); err != nil {
		return api.Job{}, err
	}
	now := s.o.Clock.Now()
	exp, none, err := api.ParseExpiration(req.Expiration, now, s.o.MaxExpirationAge)
	if err != nil {
		return api.Job{}, err
	}
	grace := s.o.Grace
	if req.Grace != "" {
		if grace, err = api.ParseGrace(req.Grace); err != nil {
			return api.Job{}, err
		}
	}
	foreign := ""
	if req.Cgroup != "" {
		if foreign, err = s.o.Cgroups.Resolve(req.Cgroup); err != nil {
			return api.Job{}, &api.InputError{Field: "cgroup", Msg: err.Error()}
		}
	}
	var out api.Job
	var opErr error
	err = s.do(ctx, func() {
		if _, ok := s.jobs[req.Job]; ok {
			opErr = fmt.Errorf("job %s: %w", req.Job, api.ErrDuplicateJob)
			return
		}
		j := &job{ID: req.Job, Expiration: exp, NoExpiration: none, Grace: grace, Registered: now,
			Phase: api.PhaseRunning, Foreign: foreign}
		s.jobs[j.ID] = j
		s.watch(j)
		s.log.Info("job registered", "job", j.ID, "expiration", exp, "no_expiration", none, "grace", grace, "foreign", foreign)
		s.emit(Event{Kind: EventRegistered, Job: j.ID})
		s.changed()
		out = j.wire()
	})
	if err != nil {
		return api.Job{}, err
	}
	return out, opErr
}

// EndJob records T_end for a running job. Ending a job already in teardown
// is not an error: exec systems may report the end twice.
func (s *Supervisor) EndJob(ctx context.Context, id string) (api.Job, error) {
	if err := api.ValidateJobID(id); err != nil {
		return api.Job{}, err
	}
	var out api.Job
	var opErr error
	err := s.do(ctx, func() {
		j := s.jobs[id]
		if j == nil {
			opErr = fmt.Errorf("job %s: %w", id, api.ErrUnknownJob)
			return
		}
		if j.Phase == api.PhaseRunning {
			s.startTeardown(j, s.o.Clock.Now())
			s.check(j)
			s.changed()
		}
		out = j.wire()
	})
	if err != nil {
		return api.Job{}, err
	}
	return out, opErr
}

// Status returns the node status.
func (s *Supervisor) Status(ctx context.Context) (api.Status, error) {
	var out api.Status
	err := s.do(ctx, func() { out = s.status })
	return out, err
}

// Resume clears the DOWN latch. Overdue jobs stay supervised but no longer
// hold the node.
func (s *Supervisor) Resume(ctx context.Context, req api.ResumeRequest) (api.Status, error) {
	if strings.TrimSpace(req.Reason) == "" {
		return api.Status{}, &api.InputError{Field: "reason", Msg: "a reason is required"}
	}
	who := "unknown peer"
	if p, ok := api.PeerFrom(ctx); ok {
		who = fmt.Sprintf("uid %d pid %d", p.UID, p.PID)
	}
	var out api.Status
	err := s.do(ctx, func() {
		if s.st.Latch.Down {
			s.log.Warn("node resumed", "by", who, "reason", req.Reason, "was", s.st.Latch.Reason)
		}
		s.st.Latch = latch{}
		for _, j := range s.jobs {
			if j.Phase == api.PhaseOverdue {
				j.Acknowledged = true
			}
		}
		s.changed()
		s.persist()
		out = s.status
	})
	return out, err
}

// Drain latches the node DOWN on an administrator's word. Like a grace
// violation it holds until Resume; auto_resume never clears it.
func (s *Supervisor) Drain(ctx context.Context, reason, by string) (api.Status, error) {
	if err := api.ValidateReason(reason); err != nil {
		return api.Status{}, err
	}
	var out api.Status
	err := s.do(ctx, func() {
		l := &s.st.Latch
		text := "drained"
		if by != "" {
			text += " by " + by
		}
		text += ": " + reason
		if !l.Down {
			*l = latch{Down: true, Kind: "drain", Since: s.o.Clock.Now(), Reason: text}
		} else {
			// A drain on top of a violation: the violation's reason stays
			// first, and only a resume clears the latch.
			l.Kind = "drain"
			if !strings.Contains(l.Reason, text) {
				l.Reason = l.Reason + " | " + text
			}
		}
		s.log.Warn("node drained", "by", by, "reason", reason)
		s.changed()
		s.persist()
		out = s.status
	})
	return out, err
}

// Diagnose returns the latest report of each job with one (or of job), and a
// fresh snapshot of a job still tearing down.
func (s *Supervisor) Diagnose(ctx context.Context, id string) ([]*diagnose.Report, error) {
	type item struct {
		last *diagnose.Report
		req  *diagnose.Request
	}
	var items []item
	var opErr error
	err := s.do(ctx, func() {
		ids := make([]string, 0, len(s.jobs))
		for k := range s.jobs {
			ids = append(ids, k)
		}
		sort.Strings(ids)
		if id != "" {
			if s.jobs[id] == nil {
				opErr = fmt.Errorf("job %s: %w", id, api.ErrUnknownJob)
				return
			}
			ids = []string{id}
		}
		for _, k := range ids {
			j := s.jobs[k]
			it := item{last: j.lastReport}
			if j.active() && (j.Cgroup != "" || j.Foreign != "") {
				r := s.request(j, diagnose.StageOnDemand, false)
				it.req = &r
			}
			if it.last != nil || it.req != nil {
				items = append(items, it)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	if opErr != nil {
		return nil, opErr
	}
	out := []*diagnose.Report{}
	for _, it := range items {
		if it.req != nil && s.o.Diagnoser != nil {
			r := s.o.Diagnoser.Snapshot(ctx, *it.req)
			if r != nil {
				r.Node = s.o.Node
				r.Outcome = diagnose.OutcomePending
				r.Summary = diagnose.Summarize(r)
				r.Suggestions = diagnose.Suggest(r)
				out = append(out, r)
				continue
			}
		}
		if it.last != nil {
			out = append(out, it.last)
		}
	}
	return out, nil
}
