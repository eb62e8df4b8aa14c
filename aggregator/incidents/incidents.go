// Package incidents is the Service's incidents (docs/DESIGN.md §5b): the
// DOWN nodes fed to the pure incident.Group after every recomputation that
// touched one, one log line per incident change, the drain reasons that
// name the incident, the administrator's confirmation past the
// blast-radius limit, the recovery when an incident's shared cause clears,
// and the clock sanity that compares each node's clock with the
// aggregator's.
//
// A Tracker asks the Service only what its Deps list: the actuators'
// limit, a resume of one node, the leader's name. It imports no wire type
// and nothing of HTTP (TestImportsNoWireTypes).
package incidents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/actuate"
	"github.com/gracewatch/gracewatch/aggregator/incident"
	"github.com/gracewatch/gracewatch/aggregator/nodelog"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/hostlist"
	"github.com/gracewatch/gracewatch/mesh"
)

const (
	// incidentLogEvery spaces the "incident changed" lines of one
	// incident: a storm that adds nodes for minutes gives a line a minute,
	// with the nodes that joined and left since the last, never one per
	// node. The opening and the closing are always logged.
	incidentLogEvery = time.Minute
	// resumeRetry is how long an incident's auto-resume waits before it
	// asks a node that is still down and clean again (its agent did not
	// answer, or refused).
	resumeRetry = time.Minute
	// maxResumesAtOnce bounds the auto-resume controls in flight.
	maxResumesAtOnce = 16
	// maxLoggedHostlist bounds a hostlist in a log line.
	maxLoggedHostlist = 512
)

// Errors of Confirm.
var (
	ErrUnknownIncident = errors.New("unknown incident")
	ErrIncidentClosed  = errors.New("incident closed")
	ErrNotLeader       = errors.New("this aggregator does not lead the actuators")
	ErrConfirmFor      = errors.New("a confirmation's time out of bounds")
)

// MaxConfirmFor bounds Confirm's d (api.MaxConfirmFor).
const MaxConfirmFor = 24 * time.Hour

// Actuators is what a Tracker needs of the actuators (*actuate.Actuators):
// the blast-radius limit. Its methods are safe for concurrent use.
type Actuators interface {
	ForgetIncident(id uint64)
	LimitStatus() actuate.LimitStatus
	Drains() bool
	StillLeading() bool
	Confirm(id uint64, nodes []string, until time.Time) actuate.ConfirmScope
}

var _ Actuators = (*actuate.Actuators)(nil)

// Counters counts the incidents' events (*metrics.Metrics).
type Counters interface {
	IncidentOpened()
	IncidentClosed()
	IncidentResumed(ok bool)
}

// Deps is what a Tracker is built with.
type Deps struct {
	// Config groups the DOWN nodes, limits the drains and resumes an
	// incident's nodes when its cause clears.
	Config incident.Config
	// Allowance is the policy's clock_skew_allowance.
	Allowance time.Duration
	// Name is this aggregator's member name (who asks an auto-resume).
	Name      string
	Actuators Actuators
	Counters  Counters
	// Resume asks node's agent to resume (an incident's auto-resume),
	// with reason and by, and waits for its answer. It is called on
	// goroutines of the Tracker's own, at most maxResumesAtOnce at once.
	Resume func(ctx context.Context, node, reason, by string) error
	// Leader returns the actuator leader's name (for ErrNotLeader).
	Leader func() string
	Clock  clock.Clock
	// Log is the Service's logger; Lines bounds the lines about one node.
	Log   *slog.Logger
	Lines *nodelog.Log
}

// Tracker is the Service's incident state. Track, Untrack, Regroup,
// ActInfo, AutoResume and ClockSkew are the Service's loop's (one
// goroutine); Incidents, Confirm, Skewed and SkewedCount are safe for
// concurrent use.
type Tracker struct {
	Deps
	cfg incident.Config

	// Owned by the loop goroutine.
	down    map[string]incident.Node // the nodes served down (and those of an incident served unreachable), as Group sees them
	dirty   bool                     // down changed since the last Group
	prefix  map[string]prefixMemo
	logs    map[uint64]*logMemo
	asked   map[string]time.Time // auto-resumes asked, per node
	resumes chan struct{}

	// Shared with readers.
	mu     sync.RWMutex
	state  incident.State
	skewed map[string]time.Duration // nodes whose clock is off, and by how much
}

// prefixMemo is the drain reason's prefix of a node, kept while its
// incident and its own reason stay the same (so that the count in it does
// not change the scheduler's reason of every node at every join).
type prefixMemo struct {
	id     uint64
	reason string
	text   string
}

// logMemo is what an incident's next "changed" line will count.
type logMemo struct {
	at           time.Time
	joined, left int
}

// New returns a Tracker of no incident.
func New(d Deps) *Tracker {
	return &Tracker{
		Deps:    d,
		cfg:     d.Config,
		down:    map[string]incident.Node{},
		prefix:  map[string]prefixMemo{},
		logs:    map[uint64]*logMemo{},
		asked:   map[string]time.Time{},
		resumes: make(chan struct{}, maxResumesAtOnce),
		skewed:  map[string]time.Duration{},
	}
}

// NodeOf is n as Group sees it; rule is the view's rule that served it
// (the cause constants of package view).
func NodeOf(n view.Node, rule string) incident.Node {
	in := incident.Node{Name: n.Name, Clean: n.Latch.Clean}
	switch rule {
	case view.CauseAgent:
		c := n.Latch.Cause
		switch {
		case c != nil && c.FSType != "":
			in.Cause = incident.Cause{Kind: incident.KindFilesystem, FSType: c.FSType, Source: c.Source, Mountpoint: c.Mountpoint}
		case c != nil:
			in.Cause = incident.Cause{Kind: incident.KindWchan, Wchan: c.Wchan}
		case n.Latch.AdminDrain:
			// An administrator's drain alone: no incident.
		default:
			in.Cause = incident.Cause{Kind: incident.KindUndiagnosed}
		}
		if c != nil {
			in.Counts = c.Counts
			in.Example = incident.Example{Job: c.Job, PID: c.ExamplePID, Comm: c.ExampleComm, Class: c.Class, Wchan: c.Wchan}
		}
	case view.CauseCentralDeadline:
		in.Cause = incident.Cause{Kind: incident.KindNoReport}
	default:
		in.Cause = incident.Cause{Kind: incident.KindUnreachable}
	}
	return in
}

// Track records a node's new served state for the grouping; rule is the
// view's rule that served it. A node of an incident that turns unreachable
// is passed to Group as such, so that its leaving is not taken for its
// cause clearing. It runs on the loop.
func (t *Tracker) Track(n view.Node, rule string) {
	var in incident.Node
	switch _, member := t.state.Member[n.Name]; {
	case n.State == view.StateDown:
		in = NodeOf(n, rule)
	case n.State == view.StateUnreachable && member:
		in = incident.Node{Name: n.Name, Unreachable: true}
		delete(t.prefix, n.Name)
		delete(t.asked, n.Name)
	default:
		t.Untrack(n.Name)
		return
	}
	if prev, ok := t.down[n.Name]; !ok || prev != in {
		t.down[n.Name] = in
		t.dirty = true
	}
}

// Untrack forgets a node that is no longer down (or forgotten). It runs on
// the loop.
func (t *Tracker) Untrack(name string) {
	if _, ok := t.down[name]; ok {
		delete(t.down, name)
		t.dirty = true
	}
	delete(t.prefix, name)
	delete(t.asked, name)
}

// Regroup runs incident.Group when the down nodes changed, publishes the
// new state, and logs and counts the changes. It runs on the loop.
func (t *Tracker) Regroup(now time.Time) {
	if !t.dirty {
		return
	}
	t.dirty = false
	next, changes := incident.Group(t.state, slices.Collect(maps.Values(t.down)), now, t.cfg)
	t.mu.Lock()
	t.state = next
	t.mu.Unlock()
	for _, ch := range changes {
		t.logIncident(ch, now)
	}
}

// logIncident logs one incident change (see incidentLogEvery) and counts it.
// A change that one node made alone (the only one that joined or left)
// takes from that node's budget of lines (incidentLine): a node that flips
// its own cause in every update opens and closes an incident of its own
// each time.
func (t *Tracker) logIncident(ch incident.Change, now time.Time) {
	inc := ch.Incident
	memo := t.logs[inc.ID]
	if memo == nil {
		memo = &logMemo{}
		t.logs[inc.ID] = memo
	}
	memo.joined += len(ch.Joined)
	memo.left += len(ch.Left)
	attrs := []any{"incident", inc.ID, "kind", string(inc.Cause.Kind), "cause", inc.Cause.String(), "nodes", len(inc.Nodes),
		"hostlist", logHostlist(inc.Nodes)}
	switch ch.Kind {
	case incident.Opened:
		t.Counters.IncidentOpened()
		attrs = append(attrs, "example", exampleText(inc.Example))
		t.incidentLine(slog.LevelWarn, ch, "incident opened", attrs...)
	case incident.Closed:
		t.Counters.IncidentClosed()
		delete(t.logs, inc.ID)
		t.Actuators.ForgetIncident(inc.ID)
		t.incidentLine(slog.LevelInfo, ch, "incident closed", "incident", inc.ID, "kind", string(inc.Cause.Kind), "cause", inc.Cause.String(),
			"duration", inc.Duration(now).Round(time.Second).String(), "peak_nodes", inc.Peak, "joined", memo.joined, "left", memo.left)
		return
	case incident.Changed:
		if now.Sub(memo.at) < incidentLogEvery {
			return
		}
		attrs = append(attrs, "joined", memo.joined, "left", memo.left)
		if !t.incidentLine(slog.LevelInfo, ch, "incident changed", attrs...) {
			return // held back: the next line counts these nodes too
		}
	}
	memo.at, memo.joined, memo.left = now, 0, 0
}

// incidentLine writes a line about ch: within the budget of its node when
// one node alone joined or left (package nodelog), always when several did (no
// node's input alone makes such a change). It reports whether the line
// was written (or its level is not logged).
func (t *Tracker) incidentLine(level slog.Level, ch incident.Change, msg string, args ...any) bool {
	var lines *nodelog.Log // nil: not bounded
	node := ""
	if movers := append(slices.Clip(ch.Joined), ch.Left...); len(movers) == 1 {
		lines, node = t.Lines, movers[0]
	}
	return lines.Write(t.Log, level, node, msg, nodelog.CallerPC(), args)
}

// logHostlist is names as a hostlist, cut for a log line.
func logHostlist(names []string) string {
	hl, err := hostlist.Compress(names)
	if err != nil {
		return fmt.Sprintf("(%d nodes)", len(names))
	}
	return view.CutText(hl, maxLoggedHostlist)
}

func exampleText(e incident.Example) string {
	if e.PID == 0 {
		return e.Node
	}
	return fmt.Sprintf("%s: job %s pid %d %s, %s in %s", e.Node, e.Job, e.PID, e.Comm, e.Class, e.Wchan)
}

// ActInfo is what the actuators are told of n besides its state (see
// actuate.ActInfo). It runs on the loop, after Regroup.
func (t *Tracker) ActInfo(n view.Node) actuate.ActInfo {
	if n.State != view.StateDown {
		return actuate.ActInfo{}
	}
	info := actuate.ActInfo{Limited: !n.Latch.AdminDrain, Early: !n.EarlyUntil.IsZero()}
	id, ok := t.state.Member[n.Name]
	if !ok {
		return info
	}
	info.Incident = id
	inc := t.state.Open[id]
	if !inc.Cause.Kind.Diagnosed() {
		return info
	}
	m := t.prefix[n.Name]
	if m.id != id || m.reason != n.Reason {
		count := fmt.Sprintf("%d nodes", len(inc.Nodes))
		if len(inc.Nodes) == 1 {
			count = "1 node"
		}
		m = prefixMemo{id: id, reason: n.Reason, text: fmt.Sprintf("incident %d (%s, %s)", id, inc.Cause.Short(), count)}
		t.prefix[n.Name] = m
	}
	info.Prefix = m.text
	return info
}

// AutoResume asks the agents of the clean nodes of every diagnosed
// incident to clear their latch, when [incidents] auto_resume is on and
// this aggregator leads (docs/DESIGN.md §5b), each node once the incident
// holds the word of auto_resume_min_nodes nodes, the node's own included,
// that its cause was shared and cleared (incident.State.Resumable): never
// on one node's word and one other's. Each node is asked once (again after
// resumeRetry if it is still down and clean), through Control as an
// administrator's resume; once up, its on="up" actuators run in batches
// (package actuate). One log line per incident and call. The resumes run
// on goroutines of their own until ctx ends; node gives the view's node
// (the loop's). It runs on the loop.
func (t *Tracker) AutoResume(ctx context.Context, now time.Time, leading bool, node func(name string) (view.Node, bool)) {
	if !t.cfg.AutoResume || !leading || ctx == nil {
		return
	}
	need := t.cfg.ResumeMin()
	for _, id := range slices.Sorted(maps.Keys(t.state.Open)) {
		inc := t.state.Open[id]
		if !inc.Cause.Kind.Diagnosed() || len(inc.Clean) == 0 {
			continue
		}
		var ask []string
		for _, name := range inc.Clean {
			if !t.state.Resumable(name, need) {
				continue
			}
			n, ok := node(name)
			if !ok || n.State != view.StateDown || !n.Latch.Clean || n.Latch.AdminDrain {
				continue
			}
			if at, asked := t.asked[name]; asked && now.Sub(at) < resumeRetry {
				continue
			}
			t.asked[name] = now
			ask = append(ask, name)
		}
		if len(ask) == 0 {
			continue
		}
		reason := fmt.Sprintf("incident %d cleared (%s): the agent verified its processes gone", id, inc.Cause.Short())
		t.Log.Info("incident: resuming its nodes that are clean", "incident", id, "cause", inc.Cause.String(), "nodes", len(ask),
			"hostlist", logHostlist(ask))
		for _, name := range ask {
			go t.resumeOne(ctx, name, reason)
		}
	}
}

// resumeOne asks one node's agent to resume (bounded by maxResumesAtOnce
// in flight) and counts the answer.
func (t *Tracker) resumeOne(ctx context.Context, node, reason string) {
	select {
	case t.resumes <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-t.resumes }()
	err := t.Resume(ctx, node, reason, t.Name+" (incident auto-resume)")
	if err != nil {
		t.Log.Debug("incident auto-resume failed; asked again later if the node stays down and clean", "node", node, "err", err)
	}
	t.Counters.IncidentResumed(err == nil)
}

// Incidents returns the open incidents and the last closed ones (by id),
// and the blast-radius limit's state. Safe for concurrent use.
func (t *Tracker) Incidents() ([]incident.Incident, actuate.LimitStatus) {
	t.mu.RLock()
	out := slices.Collect(maps.Values(t.state.Open))
	out = append(out, t.state.Closed...)
	t.mu.RUnlock()
	slices.SortFunc(out, func(a, b incident.Incident) int { return int(a.ID) - int(b.ID) })
	return out, t.Actuators.LimitStatus()
}

// Confirm records an administrator's confirmation of incident id
// (docs/DESIGN.md §5b). It covers what the administrator saw: the drains
// of the incident's nodes now, held by the blast-radius limit or not yet
// run, run past it (and take no slot); and, when d is not 0, the drains of
// every node of the incident for d more. It never covers every node that
// joins later: their drains take slots of the limit like any other, and
// past it are held until the incident is confirmed again. It returns how
// many held drains it let through and what the confirmation covers.
// Errors: ErrUnknownIncident, ErrIncidentClosed, ErrNotLeader (the leader
// holds the drains: confirm there; incident ids are each aggregator's
// own), ErrConfirmFor (d is negative or past MaxConfirmFor). Safe for
// concurrent use.
func (t *Tracker) Confirm(id uint64, reason, by string, d time.Duration) (actuate.ConfirmScope, error) {
	if d < 0 || d > MaxConfirmFor {
		return actuate.ConfirmScope{}, fmt.Errorf("%w: want 0 (none) to %v, got %v", ErrConfirmFor, MaxConfirmFor, d)
	}
	t.mu.RLock()
	inc, ok := t.state.Find(id)
	t.mu.RUnlock()
	switch {
	case !ok:
		return actuate.ConfirmScope{}, fmt.Errorf("%w: %d", ErrUnknownIncident, id)
	case !inc.Open():
		return actuate.ConfirmScope{}, fmt.Errorf("%w: incident %d closed at %s", ErrIncidentClosed, id, view.FormatTime(inc.Closed))
	}
	if t.Actuators.Drains() && !t.Actuators.StillLeading() {
		leader := t.Leader()
		return actuate.ConfirmScope{}, fmt.Errorf("%w: confirm on the leader, %s (its incident ids are its own: see its GET /v1/incidents)", ErrNotLeader, leader)
	}
	var until time.Time
	if d > 0 {
		until = t.Clock.Now().Add(d)
	}
	scope := t.Actuators.Confirm(id, inc.Nodes, until)
	later := "limited: held past the limit"
	if !scope.Until.IsZero() {
		later = "covered until " + view.FormatTime(scope.Until)
	}
	t.Log.Warn("incident confirmed by an administrator: the drains it covers run past the blast-radius limit", "incident", id,
		"cause", inc.Cause.String(), "released", scope.Released, "covers", logHostlist(scope.Nodes), "nodes_joining_later", later,
		"by", by, "reason", nodelog.Text(reason))
	return scope, nil
}

// Skewed returns the nodes whose clock is off, by how much (arrival minus
// send time).
func (t *Tracker) Skewed() map[string]time.Duration {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return maps.Clone(t.skewed)
}

// SkewedCount returns how many nodes' clocks are off.
func (t *Tracker) SkewedCount() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.skewed)
}

// ClockAllowance is the clock offset past which a node is flagged: the
// policy's clock_skew_allowance, at least minClockAllowance.
func ClockAllowance(policy time.Duration) time.Duration {
	return max(policy, minClockAllowance)
}

// minClockAllowance is the least clock offset that flags a node: the
// delivery of a message itself takes some of it.
const minClockAllowance = time.Second

// skewedOffset reports whether a measured clock offset (arrival minus send
// time) flags a node: ahead by more than allowance, or behind by more than
// allowance plus the longest delivery (mesh.MaxDelivery; a delivery only
// ever adds to the offset, so a message that a lossy network delayed is
// not taken for a clock behind).
func skewedOffset(off, allowance time.Duration) bool {
	return off < -allowance || off > allowance+mesh.MaxDelivery
}

// ClockSkew flags, from the clock offset the intake measured (arrival
// minus the send time the node proved, view.NodeInput.ClockOffset), a
// node whose clock disagrees with this aggregator's by more than the
// allowance: counted (gracewatch_aggregator_clock_skewed_nodes), shown by
// /readyz, and logged once when it starts and once when it ends (within
// the node's budget of lines, package nodelog). It runs on the loop.
func (t *Tracker) ClockSkew(node string, offset time.Duration) {
	off, was := t.skewed[node]
	allowance := ClockAllowance(t.Allowance)
	bad := skewedOffset(offset, allowance)
	switch {
	case bad && !was:
		t.Lines.Emit(t.Log, slog.LevelWarn, node, "a node's clock disagrees with this aggregator's: its deadline DOWNs are not drained before the deadline passes here",
			"node", node, "ahead", (-offset).Round(time.Millisecond).String(), "allowance", allowance)
	case !bad && was:
		t.Lines.Emit(t.Log, slog.LevelInfo, node, "a node's clock agrees with this aggregator's again",
			"node", node, "was_ahead", (-off).Round(time.Millisecond).String())
	}
	t.mu.Lock()
	if bad {
		t.skewed[node] = offset
	} else {
		delete(t.skewed, node)
	}
	t.mu.Unlock()
}
