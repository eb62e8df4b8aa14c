package aggregator

// The Service's incidents (docs/DESIGN.md §5b): the DOWN nodes fed to the
// pure incident.Group after every recomputation that touched one, one log
// line per incident change, the drain reasons that name the incident, the
// administrator's confirmation past the blast-radius limit, and the
// recovery when an incident's shared cause clears.

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
	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/incident"
	"github.com/gracewatch/gracewatch/aggregator/nodelog"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/hostlist"
	"github.com/gracewatch/gracewatch/proto/gwpb"
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

// Errors of ConfirmIncident.
var (
	ErrUnknownIncident = errors.New("unknown incident")
	ErrIncidentClosed  = errors.New("incident closed")
	ErrNotLeader       = errors.New("this aggregator does not lead the actuators")
	ErrConfirmFor      = errors.New("a confirmation's time out of bounds")
)

// incidents is the Service's incident state.
type incidents struct {
	cfg incident.Config

	// Owned by the loop goroutine.
	down        map[string]incident.Node // the nodes served down (and those of an incident served unreachable), as Group sees them
	dirty       bool                     // down changed since the last Group
	prefix      map[string]prefixMemo
	logs        map[uint64]*logMemo
	causeLogged map[string]time.Time // refused causes logged, per node
	asked       map[string]time.Time // auto-resumes asked, per node
	resumes     chan struct{}

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

func newIncidents(cfg incident.Config) *incidents {
	return &incidents{
		cfg:         cfg,
		down:        map[string]incident.Node{},
		prefix:      map[string]prefixMemo{},
		logs:        map[uint64]*logMemo{},
		causeLogged: map[string]time.Time{},
		asked:       map[string]time.Time{},
		resumes:     make(chan struct{}, maxResumesAtOnce),
		skewed:      map[string]time.Duration{},
	}
}

// incidentNode is n as Group sees it; rule is the view's rule that served
// it (the cause constants of view.go).
func incidentNode(n view.Node, rule string) incident.Node {
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

// trackDown records a node's new served state for the grouping. A node
// of an incident that turns unreachable is passed to Group as such, so
// that its leaving is not taken for its cause clearing. It runs on the
// loop.
func (s *Service) trackDown(n view.Node, rule string) {
	var in incident.Node
	switch _, member := s.inc.state.Member[n.Name]; {
	case n.State == view.StateDown:
		in = incidentNode(n, rule)
	case n.State == view.StateUnreachable && member:
		in = incident.Node{Name: n.Name, Unreachable: true}
		delete(s.inc.prefix, n.Name)
		delete(s.inc.asked, n.Name)
	default:
		s.untrackDown(n.Name)
		return
	}
	if prev, ok := s.inc.down[n.Name]; !ok || prev != in {
		s.inc.down[n.Name] = in
		s.inc.dirty = true
	}
}

// untrackDown forgets a node that is no longer down (or forgotten).
func (s *Service) untrackDown(name string) {
	if _, ok := s.inc.down[name]; ok {
		delete(s.inc.down, name)
		s.inc.dirty = true
	}
	delete(s.inc.prefix, name)
	delete(s.inc.asked, name)
}

// regroup runs incident.Group when the down nodes changed, publishes the
// new state, and logs and counts the changes. It runs on the loop.
func (s *Service) regroup(now time.Time) {
	if !s.inc.dirty {
		return
	}
	s.inc.dirty = false
	next, changes := incident.Group(s.inc.state, slices.Collect(maps.Values(s.inc.down)), now, s.inc.cfg)
	s.inc.mu.Lock()
	s.inc.state = next
	s.inc.mu.Unlock()
	for _, ch := range changes {
		s.logIncident(ch, now)
	}
}

// logIncident logs one incident change (see incidentLogEvery) and counts it.
// A change that one node made alone (the only one that joined or left)
// takes from that node's budget of lines (incidentLine): a node that flips
// its own cause in every update opens and closes an incident of its own
// each time.
func (s *Service) logIncident(ch incident.Change, now time.Time) {
	inc := ch.Incident
	memo := s.inc.logs[inc.ID]
	if memo == nil {
		memo = &logMemo{}
		s.inc.logs[inc.ID] = memo
	}
	memo.joined += len(ch.Joined)
	memo.left += len(ch.Left)
	attrs := []any{"incident", inc.ID, "kind", string(inc.Cause.Kind), "cause", inc.Cause.String(), "nodes", len(inc.Nodes),
		"hostlist", logHostlist(inc.Nodes)}
	switch ch.Kind {
	case incident.Opened:
		s.met.IncidentOpened()
		attrs = append(attrs, "example", exampleText(inc.Example))
		s.incidentLine(slog.LevelWarn, ch, "incident opened", attrs...)
	case incident.Closed:
		s.met.IncidentClosed()
		delete(s.inc.logs, inc.ID)
		s.act.ForgetIncident(inc.ID)
		s.incidentLine(slog.LevelInfo, ch, "incident closed", "incident", inc.ID, "kind", string(inc.Cause.Kind), "cause", inc.Cause.String(),
			"duration", inc.Duration(now).Round(time.Second).String(), "peak_nodes", inc.Peak, "joined", memo.joined, "left", memo.left)
		return
	case incident.Changed:
		if now.Sub(memo.at) < incidentLogEvery {
			return
		}
		attrs = append(attrs, "joined", memo.joined, "left", memo.left)
		if !s.incidentLine(slog.LevelInfo, ch, "incident changed", attrs...) {
			return // held back: the next line counts these nodes too
		}
	}
	memo.at, memo.joined, memo.left = now, 0, 0
}

// incidentLine writes a line about ch: within the budget of its node when
// one node alone joined or left (nodelog.go), always when several did (no
// node's input alone makes such a change). It reports whether the line
// was written (or its level is not logged).
func (s *Service) incidentLine(level slog.Level, ch incident.Change, msg string, args ...any) bool {
	var lines *nodelog.Log // nil: not bounded
	node := ""
	if movers := append(slices.Clip(ch.Joined), ch.Left...); len(movers) == 1 {
		lines, node = s.lines, movers[0]
	}
	return lines.Write(s.log, level, node, msg, nodelog.CallerPC(), args)
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

// actInfo is what the actuators are told of n besides its state (see
// actInfo). It runs on the loop, after regroup.
func (s *Service) actInfo(n view.Node) actuate.ActInfo {
	if n.State != view.StateDown {
		return actuate.ActInfo{}
	}
	info := actuate.ActInfo{Limited: !n.Latch.AdminDrain, Early: !n.EarlyUntil.IsZero()}
	id, ok := s.inc.state.Member[n.Name]
	if !ok {
		return info
	}
	info.Incident = id
	inc := s.inc.state.Open[id]
	if !inc.Cause.Kind.Diagnosed() {
		return info
	}
	m := s.inc.prefix[n.Name]
	if m.id != id || m.reason != n.Reason {
		count := fmt.Sprintf("%d nodes", len(inc.Nodes))
		if len(inc.Nodes) == 1 {
			count = "1 node"
		}
		m = prefixMemo{id: id, reason: n.Reason, text: fmt.Sprintf("incident %d (%s, %s)", id, inc.Cause.Short(), count)}
		s.inc.prefix[n.Name] = m
	}
	info.Prefix = m.text
	return info
}

// autoResume asks the agents of the clean nodes of every diagnosed
// incident to clear their latch, when [incidents] auto_resume is on and
// this aggregator leads (docs/DESIGN.md §5b), each node once the incident
// holds the word of auto_resume_min_nodes nodes, the node's own included,
// that its cause was shared and cleared (incident.State.Resumable): never
// on one node's word and one other's. Each node is asked once (again after
// resumeRetry if it is still down and clean), through Control as an
// administrator's resume; once up, its on="up" actuators run in batches
// (actuator_batch.go). One log line per incident and call. It runs on the
// loop.
func (s *Service) autoResume(now time.Time) {
	if !s.inc.cfg.AutoResume || !s.leading || s.runCtx == nil {
		return
	}
	need := s.inc.cfg.ResumeMin()
	for _, id := range slices.Sorted(maps.Keys(s.inc.state.Open)) {
		inc := s.inc.state.Open[id]
		if !inc.Cause.Kind.Diagnosed() || len(inc.Clean) == 0 {
			continue
		}
		var ask []string
		for _, name := range inc.Clean {
			if !s.inc.state.Resumable(name, need) {
				continue
			}
			n, ok := s.view[name]
			if !ok || n.State != view.StateDown || !n.Latch.Clean || n.Latch.AdminDrain {
				continue
			}
			if at, asked := s.inc.asked[name]; asked && now.Sub(at) < resumeRetry {
				continue
			}
			s.inc.asked[name] = now
			ask = append(ask, name)
		}
		if len(ask) == 0 {
			continue
		}
		reason := fmt.Sprintf("incident %d cleared (%s): the agent verified its processes gone", id, inc.Cause.Short())
		s.log.Info("incident: resuming its nodes that are clean", "incident", id, "cause", inc.Cause.String(), "nodes", len(ask),
			"hostlist", logHostlist(ask))
		for _, name := range ask {
			go s.resumeOne(s.runCtx, name, reason)
		}
	}
}

// resumeOne asks one node's agent to resume (bounded by maxResumesAtOnce
// in flight) and counts the answer.
func (s *Service) resumeOne(ctx context.Context, node, reason string) {
	select {
	case s.inc.resumes <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-s.inc.resumes }()
	_, err := s.control(ctx, node, &gwpb.Control{Action: gwpb.Action_ACTION_RESUME, Reason: reason, By: s.opts.Name + " (incident auto-resume)"},
		slog.LevelDebug)
	if err != nil {
		s.log.Debug("incident auto-resume failed; asked again later if the node stays down and clean", "node", node, "err", err)
	}
	s.met.IncidentResumed(err == nil)
}

// Incidents returns the open incidents and the last closed ones (by id),
// and the blast-radius limit's state. Safe for concurrent use.
func (s *Service) Incidents() ([]incident.Incident, actuate.LimitStatus) {
	s.inc.mu.RLock()
	out := slices.Collect(maps.Values(s.inc.state.Open))
	out = append(out, s.inc.state.Closed...)
	s.inc.mu.RUnlock()
	slices.SortFunc(out, func(a, b incident.Incident) int { return int(a.ID) - int(b.ID) })
	return out, s.act.LimitStatus()
}

// MaxConfirmFor bounds ConfirmIncident's d (api.MaxConfirmFor).
const MaxConfirmFor = api.MaxConfirmFor

// ConfirmIncident records an administrator's confirmation of incident id
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
func (s *Service) ConfirmIncident(id uint64, reason, by string, d time.Duration) (actuate.ConfirmScope, error) {
	if d < 0 || d > MaxConfirmFor {
		return actuate.ConfirmScope{}, fmt.Errorf("%w: want 0 (none) to %v, got %v", ErrConfirmFor, MaxConfirmFor, d)
	}
	s.inc.mu.RLock()
	inc, ok := s.inc.state.Find(id)
	s.inc.mu.RUnlock()
	switch {
	case !ok:
		return actuate.ConfirmScope{}, fmt.Errorf("%w: %d", ErrUnknownIncident, id)
	case !inc.Open():
		return actuate.ConfirmScope{}, fmt.Errorf("%w: incident %d closed at %s", ErrIncidentClosed, id, view.FormatTime(inc.Closed))
	}
	if s.act.Drains() && !s.act.StillLeading() {
		_, leader := s.Aggregators()
		return actuate.ConfirmScope{}, fmt.Errorf("%w: confirm on the leader, %s (its incident ids are its own: see its GET /v1/incidents)", ErrNotLeader, leader)
	}
	var until time.Time
	if d > 0 {
		until = s.clock.Now().Add(d)
	}
	scope := s.act.Confirm(id, inc.Nodes, until)
	later := "limited: held past the limit"
	if !scope.Until.IsZero() {
		later = "covered until " + view.FormatTime(scope.Until)
	}
	s.log.Warn("incident confirmed by an administrator: the drains it covers run past the blast-radius limit", "incident", id,
		"cause", inc.Cause.String(), "released", scope.Released, "covers", logHostlist(scope.Nodes), "nodes_joining_later", later,
		"by", by, "reason", logText(reason))
	return scope, nil
}

// incidentReadiness adds the held drains and the nodes whose clock is off
// to r.
func (s *Service) incidentReadiness(r *api.Readiness, detail *[]string) {
	st := s.act.LimitStatus()
	r.HeldDrains = st.HeldCount
	if st.HeldCount > 0 {
		*detail = append(*detail, fmt.Sprintf("%d drains held by the blast-radius limit (%d within %v): see aggregator incidents; aggregator incident confirm ID lets an incident's through",
			st.HeldCount, st.Limit, st.Window))
	}
	s.inc.mu.RLock()
	names := slices.Sorted(maps.Keys(s.inc.skewed))
	for _, name := range names[:min(len(names), maxSkewListed)] {
		r.ClockSkewed = append(r.ClockSkewed, api.ClockSkew{Node: name, OffsetSeconds: -s.inc.skewed[name].Seconds()})
	}
	s.inc.mu.RUnlock()
	r.ClockSkewedNodes = len(names)
	if len(names) > 0 {
		*detail = append(*detail, fmt.Sprintf("%d nodes' clocks disagree with this aggregator's by more than %v: their deadline DOWNs wait for the deadline here",
			len(names), s.clockAllowance()))
	}
}

// maxSkewListed bounds the nodes /readyz names with their clock offset.
const maxSkewListed = 10
