// Package advisor is the grace advisor (docs/DESIGN.md §5d): from the
// teardown history (package aggregator/history) and the teardowns still
// running, over a window and a set of nodes, it tells what each candidate
// grace G would have done, and the smallest G that would have drained only
// nodes that really hung. It is pure: the records come from a Source, the
// time from the Query.
package advisor

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/history"
)

// Bounds and thresholds.
const (
	// MinRecords is the fewest released teardowns (in the window and node
	// set) the advisor recommends a G from: below it the data is too thin.
	// 50 is where one outlier moves the longest self-ended teardown, which
	// the recommendation rests on, by a fiftieth of the sample at most.
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
// (history.Store.Scan).
type Source func(fromMs, toMs int64, fn func(r *history.Record) bool) error

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
// the p-th percentile is the ⌈p·n⌉-th smallest).
type Distribution struct {
	Count               int
	P50, P99, P999, Max time.Duration
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
// drained only nodes that really hung.
type Recommendation struct {
	G time.Duration
	// LongestSelfEnded is the longest teardown that ended by itself:
	// any G below it drains a node for nothing.
	LongestSelfEnded *Evidence
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
}

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
	// FloorKnown: at least one node of the set sent its kill-path floor.
	FloorKnown bool
	Floor      Floor
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

// candidates returns the sorted, distinct candidates of q.
func candidates(q Query) []time.Duration {
	c := slices.Clone(q.Candidates)
	if len(c) == 0 {
		c = slices.Clone(DefaultCandidates)
	}
	if q.InForce > 0 {
		c = append(c, q.InForce)
	}
	slices.Sort(c)
	return slices.Compact(c)
}

// acc is the scan's accumulator.
type acc struct {
	q     Query
	cands []int64 // ms, ascending
	// Per bucket j (the number of candidates shorter than a duration):
	// counts and duration sums of every teardown, of the self-ended ones,
	// and the count of the signalled ones.
	n, self, sig []int
	sum          []int64
	nodeMax      map[string]int64
	durs         []uint32
	outcomes     [8]int
	longestSelf  *Evidence
	longestSelfD int64
	hung         []Evidence // hung or running: candidates for Caught
	hungD        []int64
	// The durations of the terminated or killed and of the unreported
	// ones (few: the overdue under enforcement).
	sigD, unrepD []int64
}

func (a *acc) bucket(d int64) int {
	j, _ := slices.BinarySearch(a.cands, d) // first candidate ≥ d: those before it are < d
	return j
}

func (a *acc) add(node string, d int64, o history.Outcome, running bool) {
	j := a.bucket(d)
	a.n[j]++
	a.sum[j] += d
	switch {
	case running:
	case o.SelfEnded():
		a.self[j]++
	case o.Signalled():
		a.sig[j]++
	}
	if m, ok := a.nodeMax[node]; !ok || d > m {
		a.nodeMax[node] = d
	}
}

// Advise answers q over the records of src and the running teardowns, with
// the nodes' kill-path floors.
func Advise(q Query, src Source, running []Running, floors []Floor) (*Advice, error) {
	if q.ToMs <= q.FromMs {
		return nil, fmt.Errorf("advisor: empty window [%d, %d)", q.FromMs, q.ToMs)
	}
	if q.TopN <= 0 {
		q.TopN = DefaultTopN
	}
	q.TopN = min(q.TopN, MaxTopN)
	cs := candidates(q)
	a := &acc{q: q, nodeMax: map[string]int64{}}
	for _, c := range cs {
		a.cands = append(a.cands, c.Milliseconds())
	}
	k := len(cs) + 1
	a.n, a.self, a.sig, a.sum = make([]int, k), make([]int, k), make([]int, k), make([]int64, k)
	out := &Advice{FromMs: q.FromMs, ToMs: q.ToMs, NowMs: q.NowMs, Outcomes: map[string]int{}}
	users, cmds := newTops(), newTops()
	topG := q.TopG.Milliseconds()
	countTop := func(user, cmd string, d int64, hung bool, g int64) {
		if d > g || hung {
			users.add(user, d > g, hung)
			cmds.add(cmd, d > g, hung)
		}
	}
	keep := func(node string) bool { return q.Nodes == nil || q.Nodes(node) }
	err := src(q.FromMs, q.ToMs, func(r *history.Record) bool {
		if !keep(r.Node) {
			return true
		}
		d := r.DurationMs()
		a.add(r.Node, d, r.Outcome, false)
		a.durs = append(a.durs, uint32(min(max(d, 0), math.MaxUint32)))
		a.outcomes[r.Outcome]++
		if r.Outcome.SelfEnded() && (a.longestSelf == nil || d > a.longestSelfD) {
			a.longestSelf, a.longestSelfD = evidence(r), d
		}
		switch r.Outcome {
		case history.OutcomeHung:
			a.hung = append(a.hung, *evidence(r))
			a.hungD = append(a.hungD, d)
		case history.OutcomeTerminated, history.OutcomeKilled:
			a.sigD = append(a.sigD, d)
		case history.OutcomeUnreported:
			a.unrepD = append(a.unrepD, d)
		}
		if topG > 0 {
			countTop(r.User, r.Command, d, r.Outcome == history.OutcomeHung, topG)
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("advisor: %w", err)
	}
	out.Records = len(a.durs)
	for _, rt := range running {
		if !keep(rt.Node) || rt.StartMs < q.FromMs || rt.StartMs >= q.ToMs {
			continue
		}
		d := max(q.NowMs-rt.StartMs, 0)
		out.Running++
		a.add(rt.Node, d, history.OutcomeUnreported, true)
		ev := Evidence{Node: rt.Node, Job: rt.Job, User: orUnknown(rt.User), Command: orUnknown(rt.Command), Duration: ms(d), Outcome: "running"}
		a.hung = append(a.hung, ev)
		a.hungD = append(a.hungD, d)
		if out.LongestRunning == nil || ms(d) > out.LongestRunning.Duration {
			e := ev
			out.LongestRunning = &e
		}
	}
	out.Nodes = len(a.nodeMax)
	for o, n := range a.outcomes {
		if n > 0 {
			out.Outcomes[history.Outcome(o).String()] = n
		}
	}
	out.Durations = distribution(a.durs)
	a.table(out, cs, q)
	out.Floor, out.FloorKnown = floorOf(floors, keep)
	a.recommend(out)

	// The top lists.
	switch {
	case topG > 0:
	case out.Recommendation != nil:
		topG = out.Recommendation.G.Milliseconds()
	default:
		topG = q.InForce.Milliseconds()
	}
	out.TopG = ms(topG)
	if q.TopG <= 0 {
		err := src(q.FromMs, q.ToMs, func(r *history.Record) bool {
			if keep(r.Node) {
				countTop(r.User, r.Command, r.DurationMs(), r.Outcome == history.OutcomeHung, topG)
			}
			return true
		})
		if err != nil {
			return nil, fmt.Errorf("advisor: %w", err)
		}
	}
	for _, rt := range running {
		if keep(rt.Node) && rt.StartMs >= q.FromMs && rt.StartMs < q.ToMs {
			d := max(q.NowMs-rt.StartMs, 0)
			countTop(rt.User, rt.Command, d, d > topG, topG)
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
		sufN[j], sufSelf[j], sufSum[j] = sufN[j+1]+a.n[j], sufSelf[j+1]+a.self[j], sufSum[j+1]+a.sum[j]
	}
	nodeB := make([]int, k)
	for _, m := range a.nodeMax {
		nodeB[a.bucket(m)]++
	}
	sig := 0
	for i, g := range cs {
		sig += a.sig[i] // signalled ones no longer than g
		nodes := 0
		for j := i + 1; j < k; j++ {
			nodes += nodeB[j]
		}
		gm := g.Milliseconds()
		out.Candidates = append(out.Candidates, Candidate{G: g, InForce: g == q.InForce, Overdue: sufN[i+1], Nodes: nodes,
			PlannedWrong: ms(sufSum[i+1] - gm*int64(sufN[i+1])), FalseDrains: sufSelf[i+1], Unknown: sig})
	}
}

// recommend fills out.Recommendation, or out.Thin with why not.
func (a *acc) recommend(out *Advice) {
	switch {
	case out.Records == 0:
		out.Thin = "no released teardowns in the window for these nodes"
		return
	case out.Records < MinRecords:
		out.Thin = fmt.Sprintf("too thin: %d released teardowns in the window, the advisor recommends from %d", out.Records, MinRecords)
		return
	case a.longestSelf == nil:
		out.Thin = "no teardown in the window ended by itself (every one was signalled or unreported): nothing bounds G from below"
		return
	}
	g := a.longestSelfD
	if out.FloorKnown {
		g = max(g, out.Floor.Ms)
	}
	g = (g + 999) / 1000 * 1000 // a whole second, at or above both
	r := &Recommendation{G: ms(g), LongestSelfEnded: a.longestSelf}
	for i, d := range a.hungD {
		if d > g {
			r.Caught++
			r.CaughtExamples = append(r.CaughtExamples, a.hung[i])
		} else if a.hung[i].Outcome != "running" {
			r.Missed++
		}
	}
	slices.SortStableFunc(r.CaughtExamples, func(x, y Evidence) int { return cmp.Compare(y.Duration, x.Duration) })
	r.CaughtExamples = r.CaughtExamples[:min(len(r.CaughtExamples), MaxEvidence)]
	for _, d := range a.sigD {
		if d > g {
			r.Signalled++
		}
	}
	for _, d := range a.unrepD {
		if d > g {
			r.Unreported++
		}
	}
	out.Recommendation = r
}

// notes adds the answer's caveats.
func (a *acc) notes(out *Advice) {
	if out.Records > 0 && out.Records < MinForP999 {
		out.Notes = append(out.Notes, fmt.Sprintf("p99.9 rests on %d teardowns (fewer than %d): it is the maximum or next to it", out.Records, MinForP999))
	}
	if !out.FloorKnown {
		out.Notes = append(out.Notes, "kill-path floor unknown: no node of the set sent it (an agent that could not read its exec system's settings, or predates it)")
	}
	if n := out.Outcomes[history.OutcomeTerminated.String()] + out.Outcomes[history.OutcomeKilled.String()] + out.Outcomes[history.OutcomeHung.String()]; n > 0 {
		out.Notes = append(out.Notes, fmt.Sprintf("%d teardowns were ended or outlived a signal at their G: they are known to last at least as long as they did, not how much longer (counted as unknown for a G at or above that)", n))
	}
	if out.Running > 0 {
		out.Notes = append(out.Notes, fmt.Sprintf("%d teardowns still run: counted with their time so far, a lower bound", out.Running))
	}
}

func floorOf(floors []Floor, keep func(string) bool) (Floor, bool) {
	var best Floor
	known := false
	for _, f := range floors {
		if f.Ms <= 0 || !keep(f.Node) {
			continue
		}
		if !known || f.Ms > best.Ms || (f.Ms == best.Ms && f.Node < best.Node) {
			best, known = f, true
		}
	}
	return best, known
}

func evidence(r *history.Record) *Evidence {
	return &Evidence{Node: r.Node, Job: r.JobString(), User: orUnknown(r.User), Command: orUnknown(r.Command), Cause: r.Cause,
		Duration: ms(r.DurationMs()), Outcome: r.Outcome.String()}
}

func orUnknown(s string) string {
	if s == "" {
		return Unknown
	}
	return s
}

func ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

// distribution computes the nearest-rank percentiles of d (reordering it).
func distribution(d []uint32) Distribution {
	n := len(d)
	if n == 0 {
		return Distribution{}
	}
	rank := func(p float64) int { return max(int(math.Ceil(p*float64(n))), 1) - 1 }
	out := Distribution{Count: n}
	// Select the highest rank first: each selection leaves the elements
	// below its rank below it, so the next one selects in that prefix.
	hi := n
	for _, v := range []struct {
		r int
		p *time.Duration
	}{{n - 1, &out.Max}, {rank(0.999), &out.P999}, {rank(0.99), &out.P99}, {rank(0.5), &out.P50}} {
		sel(d[:hi], v.r)
		*v.p = ms(int64(d[v.r]))
		hi = v.r + 1
	}
	return out
}

// sel reorders d so that d[k] is the k-th smallest, everything before it
// no larger (Hoare's quickselect, median of three).
func sel(d []uint32, k int) {
	lo, hi := 0, len(d)-1
	for hi > lo {
		mid := lo + (hi-lo)/2
		if d[mid] < d[lo] {
			d[mid], d[lo] = d[lo], d[mid]
		}
		if d[hi] < d[lo] {
			d[hi], d[lo] = d[lo], d[hi]
		}
		if d[hi] < d[mid] {
			d[hi], d[mid] = d[mid], d[hi]
		}
		p := d[mid]
		i, j := lo, hi
		for i <= j {
			for d[i] < p {
				i++
			}
			for d[j] > p {
				j--
			}
			if i <= j {
				d[i], d[j] = d[j], d[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return
		}
	}
}

// tops counts long and hung teardowns by name.
type tops struct{ m map[string]*Top }

func newTops() *tops { return &tops{m: map[string]*Top{}} }

func (t *tops) add(name string, long, hung bool) {
	name = orUnknown(name)
	e := t.m[name]
	if e == nil {
		e = &Top{Name: name}
		t.m[name] = e
	}
	if long {
		e.Long++
	}
	if hung {
		e.Hung++
	}
}

// top returns the n names with the most long (then hung) teardowns.
func (t *tops) top(n int) []Top {
	out := make([]Top, 0, len(t.m))
	for _, e := range t.m {
		out = append(out, *e)
	}
	slices.SortFunc(out, func(a, b Top) int {
		if c := cmp.Compare(b.Long+b.Hung, a.Long+a.Hung); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Hung, a.Hung); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return out[:min(len(out), n)]
}
