// Package advisor is the grace advisor (docs/DESIGN.md §5d): from the
// teardown history (package aggregator/history) and the teardowns still
// running, over a window and a set of nodes, it tells what each candidate
// grace G would have done, and the smallest G that would have drained only
// nodes that really hung. No one node can steer it: what it rests on
// counts each node once (backing.go). It is pure: the records come from a
// Source, the time from the Query.
package advisor

import (
	"fmt"
	"slices"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/history"
)

// Bounds and thresholds.
const (
	// MinRecords is the fewest released teardowns (in the window and node
	// set, as the percentiles count them: see nodeShare) the advisor
	// recommends a G from: below it the data is too thin. 50 is where one
	// outlier is a fiftieth of the sample at most.
	MinRecords = 50
	// MinForP999 is the fewest teardowns that give p99.9 a meaning of its
	// own (below it p99.9 is the maximum or next to it, and a note says so).
	MinForP999 = 1000
	// MaxCandidates bounds the candidate G values of one query.
	MaxCandidates = 32
	// MaxTopN bounds the top lists; DefaultTopN is their default length.
	MaxTopN     = 50
	DefaultTopN = 10
	// MaxEvidence bounds the hung teardowns listed as caught.
	MaxEvidence = 10
)

// DefaultCandidates are the G values every answer covers, from seconds to
// hours, besides the G in force.
var DefaultCandidates = []time.Duration{10 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute,
	10 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 6 * time.Hour}

// Running is a teardown still running (in the view now): its duration so
// far is a lower bound.
type Running struct {
	Node, Job, User, Command string
	StartMs, GraceMs         int64
}

// Floor is one node's kill-path floor: the smallest G that does not latch
// it before its exec system's own SIGKILL reached a job at its limit.
type Floor struct {
	Node string
	Ms   int64
	// Path says how it was computed (StateUpdate.kill_path).
	Path string
}

// Source scans the stored records whose start lies in [fromMs, toMs)
// (history.Store.ScanRaw).
type Source func(fromMs, toMs int64, fn func(r *history.Raw) bool) error

// Query is one question to the advisor.
type Query struct {
	// FromMs and ToMs bound the teardowns' starts: [FromMs, ToMs).
	FromMs, ToMs int64
	// NowMs is the time of the answer (the running ones' end so far).
	NowMs int64
	// Nodes, if set, keeps the teardowns of the nodes it accepts.
	Nodes func(node string) bool
	// InForce is the cluster's G (always a candidate).
	InForce time.Duration
	// Candidates replaces DefaultCandidates when set.
	Candidates []time.Duration
	// TopG, if set, is the G the top lists count "long" over; else the
	// recommended G, else InForce.
	TopG time.Duration
	// TopN is the top lists' length; 0: DefaultTopN.
	TopN int
}

// Distribution is the released teardowns' durations (nearest rank:
// the p-th percentile is the ⌈p·n⌉-th smallest) as they count: no node for
// more than NodeCap records, no duration as longer than Bound (backing.go).
type Distribution struct {
	// Count is the records counted (Advice.Records less the excess of the
	// Capped nodes).
	Count               int
	P50, P99, P999, Max time.Duration
	// NodeCap is the most records one node counts for: twice the median
	// node's. Capped are the nodes over it (the most first, at most
	// MaxEvidence), with their records.
	NodeCap int
	Capped  []NodeCount
	// Bound is the longest duration counted: the longest teardown that
	// MinBacking nodes reached (the MinBacking-th node's own longest); 0
	// with fewer nodes. Above are the nodes whose own longest is past it,
	// each with that teardown: counted as Bound.
	Bound time.Duration
	Above []Evidence
}

// Candidate is what one G would have done over the window.
type Candidate struct {
	G time.Duration
	// InForce: the cluster's G.
	InForce bool
	// Overdue counts the teardowns longer than G (the running ones whose
	// time so far is).
	Overdue int
	// Nodes counts the distinct nodes of those: the nodes drained.
	Nodes int
	// PlannedWrong is the node time the scheduler would have planned
	// wrongly: Σ (duration − G) over the teardowns longer than G, the
	// running ones up to now (a lower bound for those and the signalled
	// ones).
	PlannedWrong time.Duration
	// FalseDrains counts the overdue ones that ended by themselves (clean
	// or exited): each a node drained whose teardown needed no one.
	FalseDrains int
	// Unknown counts the teardowns ended by a signal (terminated, killed,
	// hung) no longer than G: how long they would have run without it is
	// not known, so neither is whether G would have caught them.
	Unknown int
}

// Evidence is one teardown the answer rests on.
type Evidence struct {
	Node, Job, User, Command, Cause string
	Duration                        time.Duration
	Outcome                         string // "running" for one still running
}

// Recommendation is the smallest G at or above the floor that would have
// drained only nodes that really hung, of the values that MinBacking nodes
// reached.
type Recommendation struct {
	G time.Duration
	// Driver says what G rests on: DriverSelfEnded (LongestSelfEnded) or
	// DriverFloor (Advice.Floor, FloorBacking nodes).
	Driver string
	// LongestSelfEnded is the longest teardown that ended by itself on at
	// least MinBacking nodes: the MinBacking-th node's own longest. Any G
	// below it drains nodes for nothing. SelfEndedBacking counts the nodes
	// whose own longest self-ended teardown is at least as long, and
	// SelfEndedNodes names the first MaxEvidence of them, longest first.
	LongestSelfEnded *Evidence
	SelfEndedBacking int
	SelfEndedNodes   []string
	// Unbacked are the longer self-ended teardowns, each the own longest
	// of a node that no MinBacking−1 others reached: not followed (G drains
	// such a node for nothing, if it recurs).
	Unbacked []Evidence
	// Caught counts the really hung teardowns (hung, or still running)
	// longer than G; CaughtExamples lists the longest MaxEvidence.
	Caught         int
	CaughtExamples []Evidence
	// Missed counts the hung teardowns no longer than G: no G separates
	// them from the longest self-ended one.
	Missed int
	// Signalled counts the terminated or killed teardowns longer than G:
	// drained, but whether they would have ended by themselves is unknown.
	Signalled int
	// Unreported counts the teardowns longer than G whose end the agent
	// did not report.
	Unreported int
	// FalseDrains counts the teardowns longer than G that ended by
	// themselves: those of the Unbacked nodes.
	FalseDrains int
}

// What a recommendation rests on (Recommendation.Driver).
const (
	DriverSelfEnded = "self_ended"
	DriverFloor     = "floor"
)

// Top is one user's or command's count of long or hung teardowns.
type Top struct {
	Name string // "unknown" for none named
	// Long counts the teardowns longer than the top lists' G (running
	// ones included); Hung those that survived SIGKILL or run past it.
	Long, Hung int
}

// Advice is the advisor's answer.
type Advice struct {
	FromMs, ToMs, NowMs int64
	// Records counts the released teardowns in the window and node set;
	// Running the ones still running.
	Records, Running int
	Nodes            int
	Durations        Distribution
	// LongestRunning is the longest running teardown's time so far.
	LongestRunning *Evidence
	// Outcomes counts the released teardowns by outcome.
	Outcomes   map[string]int
	Candidates []Candidate
	// FloorKnown: at least MinBacking nodes of the set sent a kill-path
	// floor. Floor is the MinBacking-th largest; FloorBacking counts the
	// nodes whose floor reaches it and FloorNodes names the first
	// MaxEvidence; FloorAbove are the larger floors, not followed (or,
	// when FloorKnown is false, the floors of the fewer nodes).
	FloorKnown   bool
	Floor        Floor
	FloorBacking int
	FloorNodes   []string
	FloorAbove   []Floor
	// Thin says why no G is recommended ("" when one is).
	Thin           string
	Recommendation *Recommendation
	// TopG is the G the top lists count over.
	TopG                 time.Duration
	TopUsers, TopCommand []Top
	// Notes are caveats of this answer, one sentence each.
	Notes []string
}

// Unknown is how a missing user or command is shown.
const Unknown = "unknown"

// candidates returns the sorted, distinct candidates of q (none
// negative).
func candidates(q Query) []time.Duration {
	c := slices.DeleteFunc(slices.Clone(q.Candidates), func(g time.Duration) bool { return g < 0 })
	if len(q.Candidates) == 0 {
		c = slices.Clone(DefaultCandidates)
	}
	if q.InForce > 0 {
		c = append(c, q.InForce)
	}
	slices.Sort(c)
	return slices.Compact(c)
}

// Advise answers q over the records of src and the running teardowns, with
// the nodes' kill-path floors. It reads the window once (again when a node
// is over the cap of the percentiles, see acc.thin, and when more than
// maxPending teardowns may be long, see acc) and holds, besides its fixed
// tables, 4 bytes per released teardown in the window (for the exact
// percentiles) and a few words per distinct node, user and command.
func Advise(q Query, src Source, running []Running, floors []Floor) (*Advice, error) {
	if q.ToMs <= q.FromMs {
		return nil, fmt.Errorf("advisor: empty window [%d, %d)", q.FromMs, q.ToMs)
	}
	if q.TopN <= 0 {
		q.TopN = DefaultTopN
	}
	q.TopN = min(q.TopN, MaxTopN)
	keep := func(node string) bool { return q.Nodes == nil || q.Nodes(node) }
	cs := candidates(q)
	out := &Advice{FromMs: q.FromMs, ToMs: q.ToMs, NowMs: q.NowMs, Outcomes: map[string]int{}}
	out.Floor, out.FloorKnown, out.FloorBacking, out.FloorNodes, out.FloorAbove = floorOf(floors, keep)
	a := newAcc(q, cs, out)
	if err := src(q.FromMs, q.ToMs, a.record); err != nil {
		return nil, fmt.Errorf("advisor: %w", err)
	}
	out.Records = a.durs.n
	for _, rt := range running {
		if !keep(rt.Node) || rt.StartMs < q.FromMs || rt.StartMs >= q.ToMs {
			continue
		}
		d := max(satSub(q.NowMs, rt.StartMs), 0) // its time so far
		out.Running++
		a.add(a.nodes.of(rt.Node), min(d, history.MaxDurationMs), history.OutcomeUnreported, true)
		ev := Evidence{Node: rt.Node, Job: rt.Job, User: orUnknown(rt.User), Command: orUnknown(rt.Command), Duration: ms(d), Outcome: "running"}
		a.running = append(a.running, ev)
		if out.LongestRunning == nil || ms(d) > out.LongestRunning.Duration {
			e := ev
			out.LongestRunning = &e
		}
	}
	out.Nodes = a.nodesSeen()
	for o, n := range a.outcomes {
		if n > 0 {
			out.Outcomes[history.Outcome(o).String()] = n
		}
	}
	share := nodeShare(a.counts, &a.rel)
	if share.counts != nil {
		if err := a.thin(src, share); err != nil {
			return nil, err
		}
	}
	out.Durations = distribution(&a.durs, share)
	out.Durations.NodeCap, out.Durations.Capped = share.nodeCap, capped(share, a.nodes)
	if share.bound > 0 {
		out.Durations.Bound, out.Durations.Above = ms(int64(share.bound)), a.rel.above(int64(share.bound))
	}
	a.table(out, cs, q)
	if err := a.recommend(out, src); err != nil {
		return nil, err
	}

	// The top lists: counted during the scan over a given G or the G in
	// force; over the recommended G from what the scan kept (or a second
	// scan when it kept too much).
	topG := q.TopG.Milliseconds()
	users, cmds := a.users, a.cmds
	switch {
	case topG > 0:
	case out.Recommendation != nil:
		topG = out.Recommendation.G.Milliseconds()
		users, cmds = a.longUsers, a.longCmds
	default:
		topG = q.InForce.Milliseconds()
	}
	out.TopG = ms(topG)
	for _, rt := range running {
		if keep(rt.Node) && rt.StartMs >= q.FromMs && rt.StartMs < q.ToMs {
			d := max(satSub(q.NowMs, rt.StartMs), 0)
			if d > topG {
				users.add(users.names.of(orUnknown(rt.User)), true, true)
				cmds.add(cmds.names.of(orUnknown(rt.Command)), true, true)
			}
		}
	}
	out.TopUsers, out.TopCommand = users.top(q.TopN), cmds.top(q.TopN)
	a.notes(out)
	return out, nil
}

// table fills the candidates' rows from the buckets.
func (a *acc) table(out *Advice, cs []time.Duration, q Query) {
	k := len(cs) + 1
	// Suffix sums: teardowns in buckets above i are longer than cs[i].
	sufN, sufSelf, sufSum := make([]int, k+1), make([]int, k+1), make([]int64, k+1)
	for j := k - 1; j >= 0; j-- {
		sufN[j], sufSelf[j], sufSum[j] = sufN[j+1]+a.n[j], sufSelf[j+1]+a.self[j], satAdd(sufSum[j+1], a.sum[j])
	}
	nodeB := make([]int, k)
	for _, m := range a.nodeMax {
		if m >= 0 {
			nodeB[a.bucket(m)]++
		}
	}
	sig := 0
	for i, g := range cs {
		sig += a.sig[i] // signalled ones no longer than g
		nodes := 0
		for j := i + 1; j < k; j++ {
			nodes += nodeB[j]
		}
		// Σ (d − G) over the sufN[i+1] teardowns longer than G: at least 0
		// (saturated sums: 292 years of node time at most).
		pw := max(satSub(sufSum[i+1], satMul(g.Milliseconds(), sufN[i+1])), 0)
		out.Candidates = append(out.Candidates, Candidate{G: g, InForce: g == q.InForce, Overdue: sufN[i+1], Nodes: nodes,
			PlannedWrong: ms(pw), FalseDrains: sufSelf[i+1], Unknown: sig})
	}
}

// notes adds the answer's caveats.
func (a *acc) notes(out *Advice) {
	d := out.Durations
	if d.Count > 0 && d.Count < MinForP999 {
		out.Notes = append(out.Notes, fmt.Sprintf("p99.9 rests on %d teardowns (fewer than %d): it is the maximum or next to it", d.Count, MinForP999))
	}
	if len(d.Capped) > 0 {
		c := d.Capped[0]
		out.Notes = append(out.Notes, fmt.Sprintf("the percentiles count at most %d teardowns of a node (twice the median node's): %s sent %d (%d nodes over it)",
			d.NodeCap, c.Node, c.Records, len(d.Capped)))
	}
	if len(d.Above) > 0 {
		e := d.Above[0]
		out.Notes = append(out.Notes, fmt.Sprintf("the percentiles count no teardown as longer than %v, the longest that %d nodes reached: %s's job %s (%v) is longer",
			d.Bound, MinBacking, e.Node, e.Job, e.Duration))
	}
	switch {
	case !out.FloorKnown && len(out.FloorAbove) > 0:
		out.Notes = append(out.Notes, floorNote(out.FloorAbove))
	case !out.FloorKnown:
		out.Notes = append(out.Notes, "kill-path floor unknown: no node of the set sent it (an agent that could not read its exec system's settings, or predates it)")
	case len(out.FloorAbove) > 0:
		f := out.FloorAbove[0]
		out.Notes = append(out.Notes, fmt.Sprintf("kill-path floor %v is the largest that %d nodes report: %s's %v is not followed", ms(out.Floor.Ms), MinBacking, f.Node, ms(f.Ms)))
	}
	if n := out.Outcomes[history.OutcomeTerminated.String()] + out.Outcomes[history.OutcomeKilled.String()] + out.Outcomes[history.OutcomeHung.String()]; n > 0 {
		out.Notes = append(out.Notes, fmt.Sprintf("%d teardowns were ended or outlived a signal at their G: they are known to last at least as long as they did, not how much longer (counted as unknown for a G at or above that)", n))
	}
	if out.Running > 0 {
		out.Notes = append(out.Notes, fmt.Sprintf("%d teardowns still run: counted with their time so far, a lower bound", out.Running))
	}
}

func orUnknown(s string) string {
	if s == "" {
		return Unknown
	}
	return s
}
