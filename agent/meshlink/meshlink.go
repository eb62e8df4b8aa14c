package meshlink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/gracewatch/gracewatch/agent/diagnose"
	"github.com/gracewatch/gracewatch/agent/execsys"
	"github.com/gracewatch/gracewatch/agent/request"
	"github.com/gracewatch/gracewatch/agent/teardown"
	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/ratelog"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// controlTimeout bounds the handling of one control message.
const controlTimeout = 10 * time.Second

// recheckEvery is how often the state is delivered again to each
// aggregator that gossip has lost (mesh.AggregatorRef.Lost): a delivery is
// the proof that it is still there (it keeps it in the mesh's book), and
// tells it this node is alive.
const recheckEvery = 30 * time.Second

// Supervisor is what the link asks of the teardown supervisor
// (*teardown.Supervisor): the node's status, and the changes the control
// messages ask for.
type Supervisor interface {
	Status(ctx context.Context) (teardown.Status, error)
	Resume(ctx context.Context, req request.ResumeRequest) (teardown.Status, error)
	Drain(ctx context.Context, reason, by string) (teardown.Status, error)
	StartJob(ctx context.Context, req request.JobStartRequest) (teardown.Job, error)
	UpdateJob(ctx context.Context, id string, req request.JobUpdateRequest) (teardown.Job, error)
}

// Mesh is what the link asks of the mesh (*mesh.Mesh): where the
// aggregators are, the node's gossiped meta, and the direct sends.
type Mesh interface {
	Send(node string, env *gwpb.Envelope) error
	SetMeta(meta *gwpb.Meta) error
	Proves() bool
	Addr() string
	Aggregators() []mesh.AggregatorRef
	AliveMembers(role gwpb.Role) []string
}

var (
	_ Supervisor = (*teardown.Supervisor)(nil)
	_ Mesh       = (*mesh.Mesh)(nil)
)

// Link publishes the node's status on the mesh (NodeMeta for everyone,
// a StateUpdate straight to every aggregator) and carries out the control
// messages aggregators send. The supervisor's callbacks only store the
// latest status and wake the publisher: they never wait on the network.
//
// It is built first, needing neither the supervisor nor the mesh: the
// supervisor is built with its OnChange and OnReport, the mesh with it as
// its Handler, and Run is given both.
type Link struct {
	log *slog.Logger
	// notify shows a status with a note (StatusNote) in the service's
	// status line; nil: nowhere.
	notify func(st teardown.Status, note string)

	mu      sync.Mutex
	latest  *teardown.Status
	reports map[string]*diagnose.Report // latest report of each job, for StateUpdate
	out     *outbox                     // released teardowns not yet delivered everywhere
	// killPath is the exec system's kill path (StateUpdate 70-71), set
	// once it is known (killPathCheck).
	killPathFloor time.Duration
	killPath      string
	wake          chan struct{} // the direct sender's
	wakeMeta      chan struct{} // the meta updater's
	ctrl          chan ctrlMsg
	probes        chan ctrlMsg // ACTION_PROBE, answered apart
	sender        *stateSender // the direct sends; set by run
	started       time.Time    // this process's start: StateUpdate.started_ms
	// aggregators are the alive aggregators seen (MemberChanged), so that
	// only a new one triggers a full send.
	aggregators map[string]bool
	// aggStarts is the start (started_ms of its proven meta) of each
	// aggregator that the state went to, and aggResent when a new start
	// last made it resend (restartResendEvery).
	aggStarts map[string]int64
	aggResent map[string]time.Time
	// lost: the aggregators gossip has lost, reached directly (for the
	// status line).
	lost []string
	now  func() time.Time
	// execCheck asks the exec systems for their kill path
	// (execsys.CheckAll; tests replace it).
	execCheck func(ctx context.Context) ([]execsys.Check, []error)
	// dropLog rate-limits the lines of controls dropped for a full
	// queue, per sender: a flood fills it (an aggregator's, or anyone's
	// where the mesh accepts unproven controls, mesh.allow_unsigned).
	dropLog *ratelog.Limiter
}

// controlDropLogEvery spaces the lines of one sender's controls dropped
// for a full queue.
const controlDropLogEvery = 10 * time.Second

// running is a Link while it runs, with the supervisor and the mesh
// that Run was given.
type running struct {
	*Link
	sup Supervisor
	m   Mesh
}

type ctrlMsg struct {
	from string
	c    *gwpb.Control
}

// New returns a link that logs to logger and calls notify with the latest
// status and StatusNote when the aggregators lost by gossip change (for
// the service's status line; nil: nowhere). Nothing runs until Run.
func New(logger *slog.Logger, notify func(st teardown.Status, note string)) *Link {
	l := &Link{
		log:      logger.With("component", "meshlink"),
		notify:   notify,
		reports:  make(map[string]*diagnose.Report),
		out:      newOutbox(logger.With("component", "meshlink")),
		wake:     make(chan struct{}, 1),
		wakeMeta: make(chan struct{}, 1),
		ctrl:     make(chan ctrlMsg, 64),
		probes:   make(chan ctrlMsg, 256),
		started:  time.Now(),
		now:      time.Now,
	}
	l.execCheck = execsys.CheckAll
	l.dropLog = ratelog.New(controlDropLogEvery)
	return l
}

// OnChange is the supervisor's OnChange: it does not block.
func (l *Link) OnChange(st teardown.Status) {
	l.mu.Lock()
	l.latest = &st
	l.out.take(st)
	l.mu.Unlock()
	l.kick()
}

// OnReport is the supervisor's OnReport: it does not block.
func (l *Link) OnReport(r *diagnose.Report) {
	l.mu.Lock()
	l.reports[r.Job] = r
	l.mu.Unlock()
	l.kick()
}

func (l *Link) kick() {
	for _, c := range []chan struct{}{l.wake, l.wakeMeta} {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// HandleMessage implements mesh.Handler: control messages are queued for
// run; everything else an agent ignores.
func (l *Link) HandleMessage(from string, env *gwpb.Envelope) {
	c := env.GetControl()
	if c == nil {
		return
	}
	q := l.ctrl
	if c.GetAction() == gwpb.Action_ACTION_PROBE {
		// A queue of their own: an aggregator is about to serve this
		// node down or unreachable unless it hears from it, and a
		// control that takes its time must not hold the answer.
		q = l.probes
	}
	select {
	case q <- ctrlMsg{from: from, c: c}:
	default:
		if ok, suppressed := l.dropLog.Allow(from, l.now()); ok {
			l.log.Warn("control queue full, dropped", "from", from, "id", c.GetId(), "action", c.GetAction().String(), "suppressed", suppressed)
		}
	}
}

// Run publishes the node's status and carries out the control messages,
// with sup and m, until ctx ends; it returns once everything it started
// has ended. The mesh must have been built with l as its Handler.
func (l *Link) Run(ctx context.Context, sup Supervisor, m Mesh) {
	(&running{Link: l, sup: sup, m: m}).run(ctx)
}

// spawn runs fn in a goroutine of its own and returns what waits until fn
// has returned (for run to defer: none of its goroutines outlives it).
func spawn(fn func()) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	return func() { <-done }
}

// serveUntil calls fn with each value from ch, one at a time, until ctx
// ends.
func serveUntil[T any](ctx context.Context, ch <-chan T, fn func(T)) {
	for {
		select {
		case <-ctx.Done():
			return
		case v := <-ch:
			fn(v)
		}
	}
}

// run publishes and handles control messages until ctx ends. The direct
// sends and the meta updates run apart, each taking the latest status:
// memberlist's UpdateNode waits for the gossip retransmits (most of a
// second), and a change must not wait behind the previous one's. The
// direct sends go through a stateSender, so that a newer state is not
// queued behind an older one's send either.
func (l *running) run(ctx context.Context) {
	sender := newStateSender(ctx, l.sendState, clock.Real{}, l.log)
	l.mu.Lock()
	l.sender = sender
	l.mu.Unlock()
	defer l.sender.close()
	defer spawn(func() { serveUntil(ctx, l.wakeMeta, func(struct{}) { l.updateMeta() }) })()
	defer spawn(func() { serveUntil(ctx, l.probes, func(cm ctrlMsg) { l.probe(ctx, cm.from, cm.c) }) })()
	defer spawn(func() { l.checkKillPath(ctx) })()
	recheck := time.NewTicker(recheckEvery)
	defer recheck.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.wake:
			l.publish()
		case cm := <-l.ctrl:
			l.control(ctx, cm)
		case <-recheck.C:
			l.recheck()
			l.mu.Lock()
			waiting := l.out.waiting()
			l.mu.Unlock()
			if waiting {
				// Released teardowns wait for an aggregator, or for
				// room in an update: a quiet node sends them too.
				l.publish()
			}
		}
	}
}

// checkKillPath asks the exec systems found on this node for their kill
// path (what `nodeagent config check` computes), once, in the background
// of the agent's start and bounded by execsys.KillPathTimeout, so that neither the
// start nor a deadline ever waits for a slow scontrol; the floor goes to
// the aggregators with the next StateUpdate (fields 70-71).
func (l *Link) checkKillPath(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, execsys.KillPathTimeout)
	defer cancel()
	checks, errs := l.execCheck(ctx)
	if ctx.Err() != nil && len(checks) == 0 {
		return
	}
	floor, path := execsys.KillPathOf(checks)
	for _, err := range errs {
		l.log.Info("exec system's kill path not read", "err", err)
	}
	if floor == 0 {
		return
	}
	l.log.Info("exec system's kill path", "floor", floor, "path", path)
	l.mu.Lock()
	l.killPathFloor, l.killPath = floor, path
	l.mu.Unlock()
	l.kick()
}

// probe answers an aggregator's probe: a ControlAck with the node's state
// (however late it arrives: it changes nothing), and the whole StateUpdate
// again to that aggregator.
func (l *running) probe(ctx context.Context, from string, c *gwpb.Control) {
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	ack := &gwpb.ControlAck{Id: c.GetId(), Ok: true}
	st, err := l.sup.Status(ctx)
	if err != nil {
		ack.Ok, ack.Error = false, err.Error()
	} else {
		ack.Meta = MetaOf(st)
	}
	l.log.Debug("probe", "from", from, "id", c.GetId(), "err", err)
	// The state first: resend returns at once, and its attempts run beside
	// the ack's, which can wait a second for a lost SYN.
	l.mu.Lock()
	sender := l.sender
	l.mu.Unlock()
	if sender != nil {
		sender.resend(from)
	}
	if err := l.m.Send(from, &gwpb.Envelope{Body: &gwpb.Envelope_Ack{Ack: ack}}); err != nil {
		l.log.Warn("cannot answer a probe", "to", from, "id", c.GetId(), "err", err)
	}
}

// updateMeta puts the latest status in the node's gossiped meta.
func (l *running) updateMeta() {
	l.mu.Lock()
	st := l.latest
	l.mu.Unlock()
	if st == nil {
		return
	}
	if err := l.m.SetMeta(gossipedMeta(*st, l.m.Proves())); err != nil {
		l.log.Warn("cannot update node meta", "err", err)
	}
}

// sendState sends u to one aggregator. It returns when ctx ends even if
// the send still waits in memberlist's connect (bounded by the profile's
// TCP timeout, which then ends it).
func (l *running) sendState(ctx context.Context, node string, u *gwpb.StateUpdate) error {
	errc := make(chan error, 1)
	go func() { errc <- l.m.Send(node, &gwpb.Envelope{Body: &gwpb.Envelope_State{State: u}}) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// publish hands the latest status with teardowns and reports to the
// sender, for every alive aggregator.
func (l *running) publish() {
	targets := l.targets() // the mesh's locks: not under l.mu
	l.mu.Lock()
	st := l.latest
	reports := make([]*diagnose.Report, 0, len(l.reports))
	if st != nil {
		keep := make(map[string]bool)
		for _, j := range st.Jobs {
			keep[j.ID] = true
		}
		for id, r := range l.reports {
			if !keep[id] {
				delete(l.reports, id)
				continue
			}
			reports = append(reports, r)
		}
	}
	if st == nil {
		l.mu.Unlock()
		return
	}
	l.out.prune(l.sender.deliveredAll(), l.now())
	tds, first := l.out.fill(*st)
	floor, path := l.killPathFloor, l.killPath
	l.mu.Unlock()
	meta := MetaOf(*st)
	if l.m != nil {
		// Where this node is reached, under its proof: the aggregator
		// probes and controls it there, not at an address that gossip
		// alone gave (mesh/reach.go).
		meta.Addr = l.m.Addr()
	}
	up := &gwpb.StateUpdate{Meta: meta, Reason: st.Reason, Teardowns: tds, StartedMs: l.started.UnixMilli(),
		KillPathFloorMs: floor.Milliseconds(), KillPath: path}
	latchOf(*st, up)
	sort.Slice(reports, func(a, b int) bool { return reports[a].Job < reports[b].Job })
	for _, r := range reports {
		detail, err := json.Marshal(r)
		if err != nil {
			continue
		}
		up.Reports = append(up.Reports, &gwpb.Report{Job: r.Job, Stage: r.Stage, Outcome: r.Outcome,
			Summary: r.Summary, TakenMs: r.Taken.UnixMilli(), DetailJson: detail})
	}
	v := l.sender.publish(up, targets)
	l.mu.Lock()
	for _, e := range first {
		if e.version == 0 {
			e.version = v
		}
	}
	l.mu.Unlock()
}

// control carries out one Control and answers with a ControlAck.
func (l *running) control(ctx context.Context, cm ctrlMsg) {
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	c := cm.c
	by := c.GetBy()
	if by == "" {
		by = cm.from
	}
	var st teardown.Status
	var err error
	if late := lateControl(c, l.now()); late != nil {
		// The aggregator has told its caller that the request timed
		// out (this agent was stopped, or the message was queued that
		// long): carrying it out now would act on a request its caller
		// believes failed.
		l.log.Warn("control refused: it arrived after its deadline", "from", cm.from, "id", c.GetId(), "action", c.GetAction().String(), "by", by, "err", late)
		ack := &gwpb.ControlAck{Id: c.GetId(), Error: late.Error()}
		if err := l.m.Send(cm.from, &gwpb.Envelope{Body: &gwpb.Envelope_Ack{Ack: ack}}); err != nil {
			l.log.Debug("cannot acknowledge control", "to", cm.from, "id", c.GetId(), "err", err)
		}
		return
	}
	switch c.GetAction() {
	case gwpb.Action_ACTION_RESUME:
		st, err = l.sup.Resume(ctx, request.ResumeRequest{Reason: fmt.Sprintf("%s (by %s)", c.GetReason(), by)})
	case gwpb.Action_ACTION_DRAIN:
		st, err = l.sup.Drain(ctx, c.GetReason(), by)
	case gwpb.Action_ACTION_REGISTER_JOB:
		err = l.registerJob(ctx, c.GetJob())
	default:
		err = fmt.Errorf("unknown control action %d", c.GetAction())
	}
	ack := &gwpb.ControlAck{Id: c.GetId(), Ok: err == nil}
	if err != nil {
		ack.Error = err.Error()
		if s, serr := l.sup.Status(ctx); serr == nil {
			st = s
		}
	}
	if st.Node != "" {
		ack.Meta = MetaOf(st)
	}
	l.log.Info("control", "from", cm.from, "id", c.GetId(), "action", c.GetAction().String(), "by", by, "job", c.GetJob().GetJob(), "ok", ack.Ok, "err", err)
	if err := l.m.Send(cm.from, &gwpb.Envelope{Body: &gwpb.Envelope_Ack{Ack: ack}}); err != nil {
		l.log.Warn("cannot acknowledge control", "to", cm.from, "id", c.GetId(), "err", err)
	}
	// The state changed: everyone else hears it too.
	l.kick()
}

// lateControl says why c must not be carried out at now: its deadline has
// passed. A Control of an older aggregator has none.
func lateControl(c *gwpb.Control, now time.Time) error {
	d := c.GetDeadlineMs()
	if d == 0 || now.UnixMilli() <= d {
		return nil
	}
	return fmt.Errorf("control arrived %v after its deadline %s (asked at %s): the caller was told it timed out; not applied",
		now.Sub(time.UnixMilli(d)).Round(time.Millisecond), time.UnixMilli(d).UTC().Format(time.RFC3339Nano),
		time.UnixMilli(c.GetAskedMs()).UTC().Format(time.RFC3339Nano))
}

// registerJob registers a job the exec system's controller told an
// aggregator of (Slurm's PrologSlurmctld), or moves the expiration of the
// job already registered here (by the node's own prolog, with the job's
// cgroup but without its E, which Slurm does not give it).
func (l *running) registerJob(ctx context.Context, r *gwpb.JobRegistration) error {
	if r == nil {
		return errors.New("register job: no job given")
	}
	_, err := l.sup.StartJob(ctx, request.JobStartRequest{Job: r.GetJob(), Expiration: r.GetExpiration(), Grace: r.GetGrace()})
	if !errors.Is(err, request.ErrDuplicateJob) {
		return err
	}
	// Registered here already. The controller's registration gives the E
	// of a job the node's prolog registered without one; it never needs
	// to move an E earlier, so the mesh may not (a shortened E is a false
	// DOWN; until Control is authenticated, issue 11, anyone with the mesh
	// key could send one).
	st, err := l.sup.Status(ctx)
	if err != nil {
		return err
	}
	for _, j := range st.Jobs {
		if j.ID != r.GetJob() || j.Expiration.IsZero() {
			continue
		}
		e, none, err := request.ParseExpiration(r.GetExpiration(), time.Now(), 0)
		if err != nil {
			return err
		}
		if !none && e.Equal(j.Expiration) {
			return nil // the same registration again: nothing to move
		}
		if !none && e.Before(j.Expiration) {
			return fmt.Errorf("job %s: %w: registered with expiration %s; the mesh's registration may only move it later, not to %s",
				r.GetJob(), request.ErrConflict, j.Expiration.UTC().Format(time.RFC3339), e.UTC().Format(time.RFC3339))
		}
	}
	_, err = l.sup.UpdateJob(ctx, r.GetJob(), request.JobUpdateRequest{Expiration: r.GetExpiration()})
	return err
}
