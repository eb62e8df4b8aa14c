// Package historian keeps the teardown history for the grace advisor
// (docs/DESIGN.md §5d): the Service's intake hands it every node's own
// StateUpdate (Record), bounded but not yet decoded, of which it stores
// the released teardowns (package aggregator/history) and keeps what the
// advisor needs of the running ones and of the node (its kill-path floor);
// Advise answers GET /v1/grace over them. Config is the [history] table.
//
// It reads the mesh's wire update (the history keeps what the node said,
// before the view's decoding) but nothing of HTTP or of the Service
// (TestImports).
package historian

import (
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/advisor"
	"github.com/gracewatch/gracewatch/aggregator/history"
	"github.com/gracewatch/gracewatch/aggregator/intake"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/nodename"
	"github.com/gracewatch/gracewatch/internal/ratelog"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// Bounds of what the glue keeps per node.
const (
	// maxCausesKept bounds the causes remembered per node by job: a
	// cause travels while the node is latched or observed, its teardown's
	// release comes later.
	maxCausesKept = 8
)

// Historian is the history and what the advisor needs beside it. Record
// is called by one goroutine (the Service's loop); Advise, Stats and Close
// are safe for concurrent use. A nil *Historian is the history off: it
// records nothing and advises history.ErrOff.
type Historian struct {
	store   *history.Store
	clock   clock.Clock
	log     *slog.Logger
	limiter *ratelog.Limiter

	mu sync.Mutex
	// floors: each node's latest kill-path floor (what it says now).
	floors map[string]advisor.Floor
	// attrs: the user and command of each node's running teardowns, by
	// job, from its latest update (the view's teardowns carry neither).
	attrs map[string]map[string][2]string
	// causes: each node's latest causes by job.
	causes map[string][]jobCause
	// advising serialises the answers: each holds a duration per record
	// of its window (4 bytes) for its percentiles.
	advising sync.Mutex
}

type jobCause struct{ job, cause string }

// Open opens the teardown history of o, or returns nil when it is off (no
// directory). Its warnings go to log (the Service's), each at most once a
// minute per node and kind.
func Open(o history.Options, clk clock.Clock, log *slog.Logger) (*Historian, error) {
	if o.Dir == "" {
		return nil, nil
	}
	st, err := history.Open(o, clk.Now())
	if err != nil {
		return nil, err
	}
	return &Historian{store: st, clock: clk, log: log, limiter: ratelog.New(time.Minute), floors: map[string]advisor.Floor{},
		attrs: map[string]map[string][2]string{}, causes: map[string][]jobCause{}}, nil
}

// causeString is a cause as the history keeps it: the file system's type
// and mountpoint, else the wait channel.
func causeString(c *gwpb.Cause) string {
	switch {
	case c == nil:
		return ""
	case c.GetFstype() != "":
		return strings.TrimSpace(c.GetFstype() + " " + c.GetMountpoint())
	case c.GetWchan() != "":
		return "wchan " + c.GetWchan()
	}
	return ""
}

// Record takes the released teardowns of u, a StateUpdate that node sent
// (proven to be its own with node restriction) and the intake bounded,
// into the history: a node speaks only for itself, so each record names
// node. Called by one goroutine at a time (the Service's loop).
func (h *Historian) Record(node string, u *gwpb.StateUpdate) {
	if h == nil || u == nil {
		return
	}
	now := h.clock.Now()
	tds := u.GetTeardowns()
	tds = tds[:min(len(tds), intake.MaxTeardownsKept)]
	floor := u.GetKillPathFloorMs()
	h.mu.Lock()
	if floor > 0 && floor <= history.MaxFloorMs {
		h.floors[node] = advisor.Floor{Node: node, Ms: floor, Path: view.CutText(strings.ToValidUTF8(u.GetKillPath(), "?"), intake.MaxKillPathBytes)}
	} else {
		delete(h.floors, node) // none, or past the bound: unknown
	}
	for _, c := range []*gwpb.Cause{u.GetCause(), u.GetObservedCause()} {
		if intake.BoundCause(c) == nil || c.GetJob() == "" {
			continue
		}
		cs := h.causes[node]
		if len(cs) >= maxCausesKept {
			cs = cs[1:]
		}
		h.causes[node] = append(cs, jobCause{view.CutText(c.GetJob(), intake.MaxFieldBytes), causeString(c)})
	}
	attrs := map[string][2]string{}
	for _, td := range tds {
		if td.GetPhase() != "released" && (td.GetUser() != "" || td.GetCommand() != "") {
			attrs[view.CutText(td.GetJob(), intake.MaxFieldBytes)] = [2]string{view.CutText(td.GetUser(), history.MaxUserBytes), view.CutText(td.GetCommand(), history.MaxCommandBytes)}
		}
	}
	if len(attrs) > 0 {
		h.attrs[node] = attrs
	} else {
		delete(h.attrs, node)
	}
	causes := h.causes[node]
	h.mu.Unlock()
	if floor < 0 || floor > history.MaxFloorMs {
		if ok, suppressed := h.limiter.Allow(node+"/floor", now); ok {
			h.log.Warn("kill-path floor out of bounds: not used for the grace advice", "node", nodename.Quote(node),
				"kill_path_floor_ms", floor, "max_ms", history.MaxFloorMs, "suppressed", suppressed)
		}
	}

	added := 0
	for _, td := range tds {
		if td.GetPhase() != "released" || td.GetReleasedMs() == 0 {
			continue
		}
		r := history.Record{Node: node, Job: []byte(td.GetJob()), User: td.GetUser(), Command: td.GetCommand(),
			ReleasedMs: td.GetReleasedMs(), GraceMs: td.GetGraceMs(), Outcome: history.ParseOutcome(td.GetOutcome())}
		// The start D − G, computed only from a positive deadline and a
		// grace within the bound (it cannot wrap); else 0, refused (a
		// grace past the bound as such).
		if dl, g := td.GetDeadlineMs(), td.GetGraceMs(); dl > 0 && g >= 0 && g <= history.MaxGraceMs {
			r.StartMs = dl - g
		}
		if r.Outcome != history.OutcomeClean {
			for i := len(causes) - 1; i >= 0; i-- {
				if causes[i].job == td.GetJob() {
					r.Cause = causes[i].cause
					break
				}
			}
		}
		switch why := h.store.Add(r, now); why {
		case "":
			added++
		case history.RefusedDuplicate:
		default:
			if ok, suppressed := h.limiter.Allow(node+"/"+string(why), now); ok {
				h.log.Warn("released teardown not recorded in the history", "node", nodename.Quote(node), "why", string(why),
					"job", view.CutText(td.GetJob(), 64), "start_ms", r.StartMs, "released_ms", r.ReleasedMs, "suppressed", suppressed)
			}
		}
	}
	if added > 0 {
		if err := h.store.Flush(now); err != nil {
			if ok, _ := h.limiter.Allow("flush", now); ok {
				h.log.Error("teardown history: write failed", "err", err)
			}
		}
	}
}

// Advise answers the grace advisor's query q (its NowMs is filled here,
// its InForce is inForce, the cluster's G) over the history and the
// teardowns running in nodes, the view now. One answer is computed at a
// time. Safe for concurrent use.
func (h *Historian) Advise(q advisor.Query, inForce time.Duration, nodes []view.Node) (*advisor.Advice, error) {
	if h == nil {
		return nil, history.ErrOff
	}
	q.NowMs, q.InForce = h.clock.Now().UnixMilli(), inForce
	h.mu.Lock()
	floors := make([]advisor.Floor, 0, len(h.floors))
	for _, f := range h.floors {
		floors = append(floors, f)
	}
	attrs := h.attrs
	var running []advisor.Running
	for _, n := range nodes {
		for _, td := range n.Teardowns {
			if td.Phase != "teardown" && td.Phase != "overdue" || td.Deadline.IsZero() {
				continue
			}
			a := attrs[n.Name][td.Job]
			running = append(running, advisor.Running{Node: n.Name, Job: td.Job, User: a[0], Command: a[1],
				StartMs: td.Deadline.Add(-td.Grace).UnixMilli(), GraceMs: td.Grace.Milliseconds()})
		}
	}
	h.mu.Unlock()
	sort.Slice(floors, func(i, j int) bool { return floors[i].Node < floors[j].Node })
	h.advising.Lock()
	defer h.advising.Unlock()
	return advisor.Advise(q, h.store.ScanRaw, running, floors)
}

// Stats are the history's figures; zero when it is off.
func (h *Historian) Stats() history.Stats {
	if h == nil {
		return history.Stats{}
	}
	return h.store.Stats()
}

// Close closes the store (the Service's end), logging a failure.
func (h *Historian) Close() {
	if h == nil {
		return
	}
	if err := h.store.Close(); err != nil {
		h.log.Error("teardown history: closing", "err", err)
	}
}
