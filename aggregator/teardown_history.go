package aggregator

import (
	"errors"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/advisor"
	"github.com/gracewatch/gracewatch/aggregator/history"
	"github.com/gracewatch/gracewatch/aggregator/intake"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/config"
	"github.com/gracewatch/gracewatch/internal/nodename"
	"github.com/gracewatch/gracewatch/internal/ratelog"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// The teardown history's glue (docs/DESIGN.md §5d): the intake hands every
// node's own StateUpdate to recordHistory, which stores its released
// teardowns (package aggregator/history) and keeps what the advisor needs
// of the running ones and of the node (its kill-path floor); Advise
// answers GET /v1/grace.

// Bounds of what the glue keeps per node.
const (
	// maxCausesKept bounds the causes remembered per node by job: a
	// cause travels while the node is latched or observed, its teardown's
	// release comes later.
	maxCausesKept = 8
)

// teardownHistory is the Service's history and what the advisor needs
// beside it. The store is written by the loop only; the maps are read by
// Advise under mu.
type teardownHistory struct {
	store *history.Store
	log   *ratelog.Limiter

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

// openHistory opens the teardown history of o, or returns nil when it is
// off (no directory).
func openHistory(o history.Options, now time.Time) (*teardownHistory, error) {
	if o.Dir == "" {
		return nil, nil
	}
	st, err := history.Open(o, now)
	if err != nil {
		return nil, err
	}
	return &teardownHistory{store: st, log: ratelog.New(time.Minute), floors: map[string]advisor.Floor{},
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

// recordHistory takes the released teardowns of u, a StateUpdate that node
// sent (proven to be its own with node restriction), into the history: a
// node speaks only for itself, so each record names node. Runs on the
// loop.
func (s *Service) recordHistory(node string, u *gwpb.StateUpdate) {
	h := s.hist
	if h == nil || u == nil {
		return
	}
	now := s.clock.Now()
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
		if ok, suppressed := h.log.Allow(node+"/floor", now); ok {
			s.log.Warn("kill-path floor out of bounds: not used for the grace advice", "node", nodename.Quote(node),
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
			if ok, suppressed := h.log.Allow(node+"/"+string(why), now); ok {
				s.log.Warn("released teardown not recorded in the history", "node", nodename.Quote(node), "why", string(why),
					"job", view.CutText(td.GetJob(), 64), "start_ms", r.StartMs, "released_ms", r.ReleasedMs, "suppressed", suppressed)
			}
		}
	}
	if added > 0 {
		if err := h.store.Flush(now); err != nil {
			if ok, _ := h.log.Allow("flush", now); ok {
				s.log.Error("teardown history: write failed", "err", err)
			}
		}
	}
}

// Advise answers the grace advisor's query q (its NowMs and InForce are
// filled here) over the history and the teardowns running in the view
// now. One answer is computed at a time. Safe for concurrent use.
func (s *Service) Advise(q advisor.Query) (*advisor.Advice, error) {
	h := s.hist
	if h == nil {
		return nil, history.ErrOff
	}
	now := s.clock.Now()
	q.NowMs, q.InForce = now.UnixMilli(), s.opts.Grace
	h.mu.Lock()
	floors := make([]advisor.Floor, 0, len(h.floors))
	for _, f := range h.floors {
		floors = append(floors, f)
	}
	attrs := h.attrs
	var running []advisor.Running
	for _, n := range s.Nodes() {
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

// closeHistory closes the store (Run's end).
func (s *Service) closeHistory() {
	if s.hist != nil {
		if err := s.hist.store.Close(); err != nil {
			s.log.Error("teardown history: closing", "err", err)
		}
	}
}

// HistoryConfig is the [history] table: the teardown history behind the
// grace advisor (docs/DESIGN.md §5d).
type HistoryConfig struct {
	// Dir holds the history's segment files; empty: "history" under
	// state_dir; with neither, the history is off.
	Dir string `toml:"dir"`
	// MaxBytes bounds the files (the oldest segment is dropped first); at
	// least 1 MiB.
	MaxBytes config.Size `toml:"max_bytes"`
	// MaxAge drops the segments whose newest teardown started longer ago.
	MaxAge config.Duration `toml:"max_age"`
}

// DefaultHistoryConfig is the [history] table's defaults.
func DefaultHistoryConfig() HistoryConfig {
	return HistoryConfig{MaxBytes: config.Bytes(history.DefaultMaxBytes), MaxAge: config.Dur(history.DefaultMaxAge)}
}

// validate checks the table; key prefixes the key names.
func (h HistoryConfig) validate(key string) error {
	var errs []error
	if h.Dir != "" && !filepath.IsAbs(h.Dir) {
		errs = append(errs, config.KeyErr(key+".dir", "must be an absolute path, got %q", h.Dir))
	}
	if n := h.MaxBytes.N(); n < history.MinMaxBytes || n > 1<<40 {
		errs = append(errs, config.KeyErr(key+".max_bytes", "want 1MiB to 1TiB, got %d bytes", n))
	}
	if d := h.MaxAge.D(); d < time.Hour || d > 10*365*24*time.Hour {
		errs = append(errs, config.KeyErr(key+".max_age", "want 1h to 10 years, got %v", d))
	}
	return errors.Join(errs...)
}

// Options returns the history's options with the state dir stateDir.
func (h HistoryConfig) Options(stateDir string) history.Options {
	dir := h.Dir
	if dir == "" && stateDir != "" {
		dir = filepath.Join(stateDir, "history")
	}
	return history.Options{Dir: dir, MaxBytes: h.MaxBytes.N(), MaxAge: h.MaxAge.D()}
}
