package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/advisor"
	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/history"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/hostlist"
)

// The grace advisor's HTTP API (proto/openapi.yaml): GET /v1/grace, a
// read endpoint (docs/DESIGN.md §5d).

// GraceAdvice is the API's type, as the server serves it.
type GraceAdvice = api.GraceAdvice

// Bounds of GET /v1/grace's query.
const (
	// DefaultGraceWindow is the window when from is absent.
	DefaultGraceWindow = 30 * 24 * time.Hour
	// maxGraceQueryBytes bounds the raw query (a hostlist of a big
	// cluster compresses to far less).
	maxGraceQueryBytes = 8 << 10
	// maxGraceNodes bounds the nodes a hostlist names.
	maxGraceNodes = 100000
	// minCandidate and maxCandidate bound a candidate G.
	minCandidate = time.Second
	maxCandidate = 30 * 24 * time.Hour
)

// graceParams is a parsed query.
type graceParams struct {
	from, to time.Time
	nodes    string
	set      map[string]struct{} // nil: every node
	g        []time.Duration
	topG     time.Duration
	top      int
}

// parseGraceQuery parses the query of GET /v1/grace at now. Every error
// names the parameter and says what is wanted.
func parseGraceQuery(raw string, now time.Time) (graceParams, error) {
	var p graceParams
	if len(raw) > maxGraceQueryBytes {
		return p, fmt.Errorf("query of %d bytes, at most %d", len(raw), maxGraceQueryBytes)
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return p, fmt.Errorf("query: %v", err)
	}
	for k, v := range q {
		switch k {
		case "from", "to", "nodes", "g", "top_g", "top":
		default:
			return p, fmt.Errorf("unknown query parameter %q (want from, to, nodes, g, top_g or top)", k)
		}
		if len(v) > 1 {
			return p, fmt.Errorf("%s: given %d times, want once", k, len(v))
		}
	}
	p.to = now
	if v := q.Get("to"); v != "" {
		if p.to, err = parseTime(v); err != nil {
			return p, fmt.Errorf("to: %w", err)
		}
	}
	p.from = p.to.Add(-DefaultGraceWindow)
	if v := q.Get("from"); v != "" {
		if p.from, err = parseTime(v); err != nil {
			return p, fmt.Errorf("from: %w", err)
		}
	}
	if !p.from.Before(p.to) {
		return p, fmt.Errorf("from: %s is not before to (%s)", p.from.UTC().Format(time.RFC3339), p.to.UTC().Format(time.RFC3339))
	}
	if v := q.Get("nodes"); v != "" {
		names, err := hostlist.Expand(v)
		if err != nil {
			return p, fmt.Errorf("nodes: %w", err)
		}
		if len(names) > maxGraceNodes {
			return p, fmt.Errorf("nodes: %d nodes, at most %d", len(names), maxGraceNodes)
		}
		p.nodes, p.set = v, make(map[string]struct{}, len(names))
		for _, n := range names {
			p.set[n] = struct{}{}
		}
	}
	if v := q.Get("g"); v != "" {
		parts := strings.Split(v, ",")
		if len(parts) > advisor.MaxCandidates {
			return p, fmt.Errorf("g: %d values, at most %d", len(parts), advisor.MaxCandidates)
		}
		for _, s := range parts {
			d, err := parseCandidate(s)
			if err != nil {
				return p, fmt.Errorf("g: %w", err)
			}
			p.g = append(p.g, d)
		}
		slices.Sort(p.g)
	}
	if v := q.Get("top_g"); v != "" {
		if p.topG, err = parseCandidate(v); err != nil {
			return p, fmt.Errorf("top_g: %w", err)
		}
	}
	if v := q.Get("top"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > advisor.MaxTopN {
			return p, fmt.Errorf("top: want 1 to %d, got %q", advisor.MaxTopN, v)
		}
		p.top = n
	}
	return p, nil
}

// parseTime reads RFC 3339 or Unix seconds.
func parseTime(s string) (time.Time, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n <= 0 || n > 1<<40 {
			return time.Time{}, fmt.Errorf("unix seconds %d out of range", n)
		}
		return time.Unix(n, 0), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil || t.Unix() <= 0 || t.Unix() > 1<<40 {
		return time.Time{}, fmt.Errorf("%q: want RFC 3339 (2025-06-01T12:00:00Z) or Unix seconds", view.CutText(s, 64))
	}
	return t, nil
}

// parseCandidate reads a G: a Go duration ("90s", "2m") or whole seconds.
func parseCandidate(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	d, err := time.ParseDuration(s)
	if err != nil {
		n, nerr := strconv.ParseInt(s, 10, 64)
		if nerr != nil || n > int64(maxCandidate/time.Second) {
			return 0, fmt.Errorf("%q: want a duration (\"90s\", \"2m\") or whole seconds", view.CutText(s, 32))
		}
		d = time.Duration(n) * time.Second
	}
	if d < minCandidate || d > maxCandidate {
		return 0, fmt.Errorf("%v: want %v to %v", d, minCandidate, maxCandidate)
	}
	return d, nil
}

func (s *Server) handleGrace(w http.ResponseWriter, r *http.Request) {
	p, err := parseGraceQuery(r.URL.RawQuery, s.svc.Now())
	if err != nil {
		s.writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	q := advisor.Query{FromMs: p.from.UnixMilli(), ToMs: p.to.UnixMilli(), Candidates: p.g, TopG: p.topG, TopN: p.top}
	if p.set != nil {
		q.Nodes = func(n string) bool { _, ok := p.set[n]; return ok }
	}
	adv, err := s.svc.Advise(q)
	if errors.Is(err, history.ErrOff) {
		s.writeError(w, http.StatusServiceUnavailable, "%v", err)
		return
	}
	if err != nil {
		s.writeError(w, http.StatusInternalServerError, "%v", err)
		return
	}
	out := wireAdvice(adv, s.svc.Grace())
	out.Nodes = p.nodes
	st := s.svc.HistoryStats()
	out.History = api.GraceHistory{Records: st.Records, Bytes: st.Bytes}
	if st.OldestStartMs > 0 {
		t := time.UnixMilli(st.OldestStartMs).UTC()
		out.History.OldestStart = &t
	}
	s.writeJSON(w, http.StatusOK, out)
}

func secs(d time.Duration) float64 { return d.Seconds() }

func wireEvidence(e *advisor.Evidence) *api.GraceEvidence {
	if e == nil {
		return nil
	}
	return &api.GraceEvidence{Node: e.Node, Job: e.Job, User: e.User, Command: e.Command, Cause: e.Cause, Duration: secs(e.Duration), Outcome: e.Outcome}
}

func wireEvidences(es []advisor.Evidence) []api.GraceEvidence {
	out := make([]api.GraceEvidence, 0, len(es))
	for i := range es {
		out = append(out, *wireEvidence(&es[i]))
	}
	return out
}

// nonNil is ss, or an empty list for none (the API's lists are never null).
func nonNil(ss []string) []string {
	if ss == nil {
		return []string{}
	}
	return ss
}

func wireTops(ts []advisor.Top) []api.GraceTop {
	out := make([]api.GraceTop, 0, len(ts))
	for _, t := range ts {
		out = append(out, api.GraceTop{Name: t.Name, Long: t.Long, Hung: t.Hung})
	}
	return out
}

// wireAdvice is a as the HTTP API serves it.
func wireAdvice(a *advisor.Advice, inForce time.Duration) api.GraceAdvice {
	out := api.GraceAdvice{From: time.UnixMilli(a.FromMs).UTC(), To: time.UnixMilli(a.ToMs).UTC(), Now: time.UnixMilli(a.NowMs).UTC(),
		Records: a.Records, Running: a.Running, NodesSeen: a.Nodes, LongestRunning: wireEvidence(a.LongestRunning),
		Durations: api.GraceDistribution{Count: a.Durations.Count, P50: secs(a.Durations.P50), P99: secs(a.Durations.P99),
			P999: secs(a.Durations.P999), Max: secs(a.Durations.Max), NodeCap: a.Durations.NodeCap,
			Capped: make([]api.GraceNodeCount, 0, len(a.Durations.Capped)), Bound: secs(a.Durations.Bound), Above: wireEvidences(a.Durations.Above)},
		Outcomes: a.Outcomes, GraceInForce: secs(inForce), Thin: a.Thin, TopG: secs(a.TopG),
		TopUsers: wireTops(a.TopUsers), TopCommands: wireTops(a.TopCommand), Notes: a.Notes,
		Candidates: make([]api.GraceCandidate, 0, len(a.Candidates))}
	if out.Notes == nil {
		out.Notes = []string{}
	}
	for _, c := range a.Candidates {
		out.Candidates = append(out.Candidates, api.GraceCandidate{G: secs(c.G), InForce: c.InForce, Overdue: c.Overdue, Nodes: c.Nodes,
			PlannedWrong: secs(c.PlannedWrong), FalseDrains: c.FalseDrains, Unknown: c.Unknown})
	}
	for _, c := range a.Durations.Capped {
		out.Durations.Capped = append(out.Durations.Capped, api.GraceNodeCount{Node: c.Node, Records: c.Records})
	}
	if a.FloorKnown {
		fl := &api.GraceFloor{Seconds: float64(a.Floor.Ms) / 1000, Node: a.Floor.Node, Path: a.Floor.Path, Backing: a.FloorBacking,
			Nodes: nonNil(a.FloorNodes), Above: make([]api.GraceNodeFloor, 0, len(a.FloorAbove))}
		for _, f := range a.FloorAbove {
			fl.Above = append(fl.Above, api.GraceNodeFloor{Node: f.Node, Seconds: float64(f.Ms) / 1000, Path: f.Path})
		}
		out.KillPathFloor = fl
	}
	if r := a.Recommendation; r != nil {
		out.Recommendation = &api.GraceRecommendation{G: secs(r.G), Driver: r.Driver, LongestSelfEnded: wireEvidence(r.LongestSelfEnded),
			Backing: r.SelfEndedBacking, Nodes: nonNil(r.SelfEndedNodes), Unbacked: wireEvidences(r.Unbacked), Caught: r.Caught,
			Missed: r.Missed, Signalled: r.Signalled, Unreported: r.Unreported, FalseDrains: r.FalseDrains,
			CaughtExamples: wireEvidences(r.CaughtExamples)}
	}
	return out
}
