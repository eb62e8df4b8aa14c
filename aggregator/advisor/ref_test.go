package advisor

// The advisor as first written (a map per node, user and command, records
// with their strings, a sort-free but reordering quickselect, a second
// scan for the top lists), with each node's share bounded as plainly
// (every node's durations kept apart, sorted lists of the nodes' longest),
// kept as the reference the fast one must agree with on every answer
// (TestAdviseMatchesReference).

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/history"
)

type refSource func(fromMs, toMs int64, fn func(r *history.Record) bool) error

// refBest is a node's longest teardown of a kind: its length and the
// evidence of the first record that long.
type refBest struct {
	d  int64
	ev *Evidence
}

// refOrder sorts the nodes' longest: longest first, then by node name.
func refOrder(m map[string]refBest) []refBest {
	var out []refBest
	for _, b := range m {
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b refBest) int {
		if c := cmp.Compare(b.d, a.d); c != 0 {
			return c
		}
		return cmp.Compare(a.ev.Node, b.ev.Node)
	})
	return out
}

// refAcc is the scan's accumulator.
type refAcc struct {
	q     Query
	cands []int64 // ms, ascending
	// Per bucket j (the number of candidates shorter than a duration):
	// counts and duration sums of every teardown, of the self-ended ones,
	// and the count of the signalled ones.
	n, self, sig []int
	sum          []int64
	nodeMax      map[string]int64
	outcomes     [8]int
	// Each node's durations in the order read, and its longest released
	// and self-ended teardowns (with when they were reached).
	nodeDurs          map[string][]int64
	relBest, selfBest map[string]refBest
	seq               int
	hung              []Evidence // hung or running: candidates for Caught
	hungD             []int64
	// The durations of the terminated or killed and of the unreported
	// ones (few: the overdue under enforcement).
	sigD, unrepD []int64
	// The self-ended ones' durations.
	selfD []int64
}

func (a *refAcc) bucket(d int64) int {
	j, _ := slices.BinarySearch(a.cands, d) // first candidate ≥ d: those before it are < d
	return j
}

func (a *refAcc) add(node string, d int64, o history.Outcome, running bool) {
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
func refAdvise(q Query, src refSource, running []Running, floors []Floor) (*Advice, error) {
	if q.ToMs <= q.FromMs {
		return nil, fmt.Errorf("advisor: empty window [%d, %d)", q.FromMs, q.ToMs)
	}
	if q.TopN <= 0 {
		q.TopN = DefaultTopN
	}
	q.TopN = min(q.TopN, MaxTopN)
	cs := candidates(q)
	a := &refAcc{q: q, nodeMax: map[string]int64{}, nodeDurs: map[string][]int64{}, relBest: map[string]refBest{}, selfBest: map[string]refBest{}}
	for _, c := range cs {
		a.cands = append(a.cands, c.Milliseconds())
	}
	k := len(cs) + 1
	a.n, a.self, a.sig, a.sum = make([]int, k), make([]int, k), make([]int, k), make([]int64, k)
	out := &Advice{FromMs: q.FromMs, ToMs: q.ToMs, NowMs: q.NowMs, Outcomes: map[string]int{}}
	users, cmds := newRefTops(), newRefTops()
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
		d := min(max(r.DurationMs(), 0), history.MaxDurationMs)
		a.add(r.Node, d, r.Outcome, false)
		a.nodeDurs[r.Node] = append(a.nodeDurs[r.Node], d)
		a.outcomes[r.Outcome]++
		if b, ok := a.relBest[r.Node]; !ok || d > b.d {
			a.relBest[r.Node] = refBest{d, refEvidence(r)}
		}
		if b, ok := a.selfBest[r.Node]; r.Outcome.SelfEnded() && (!ok || d > b.d) {
			a.selfBest[r.Node] = refBest{d, refEvidence(r)}
		}
		switch r.Outcome {
		case history.OutcomeHung:
			a.hung = append(a.hung, *refEvidence(r))
			a.hungD = append(a.hungD, d)
		case history.OutcomeTerminated, history.OutcomeKilled:
			a.sigD = append(a.sigD, d)
		case history.OutcomeUnreported:
			a.unrepD = append(a.unrepD, d)
		case history.OutcomeClean, history.OutcomeExited:
			a.selfD = append(a.selfD, d)
		}
		if topG > 0 {
			countTop(r.User, r.Command, d, r.Outcome == history.OutcomeHung, topG)
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("advisor: %w", err)
	}
	for _, ds := range a.nodeDurs {
		out.Records += len(ds)
	}
	for _, rt := range running {
		if !keep(rt.Node) || rt.StartMs < q.FromMs || rt.StartMs >= q.ToMs {
			continue
		}
		d := max(q.NowMs-rt.StartMs, 0)
		out.Running++
		a.add(rt.Node, min(d, history.MaxDurationMs), history.OutcomeUnreported, true)
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
	out.Durations = a.distribution()
	a.table(out, cs, q)
	out.Floor, out.FloorKnown, out.FloorBacking, out.FloorNodes, out.FloorAbove = floorOf(floors, keep)
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
	(&acc{}).notes(out)
	return out, nil
}

// table fills the candidates' rows from the buckets.
func (a *refAcc) table(out *Advice, cs []time.Duration, q Query) {
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

// distribution: every node's durations, the excess of a node over twice
// the median node's count dropped (its i-th of c kept when
// ⌊(i+1)·cap/c⌋ > ⌊i·cap/c⌋), none counted past the MinBacking-th longest
// of the nodes' own longest.
func (a *refAcc) distribution() Distribution {
	if len(a.nodeDurs) == 0 {
		return Distribution{}
	}
	var counts []int
	for _, ds := range a.nodeDurs {
		counts = append(counts, len(ds))
	}
	slices.Sort(counts)
	nodeCap := 2 * counts[(len(counts)-1)/2]
	var bound int64
	rel := refOrder(a.relBest)
	if len(rel) >= MinBacking {
		bound = rel[MinBacking-1].d
	}
	var durs []uint32
	var over []NodeCount
	for node, ds := range a.nodeDurs {
		c := int64(len(ds))
		if c > int64(nodeCap) {
			over = append(over, NodeCount{Node: node, Records: len(ds)})
		}
		for i, d := range ds {
			if c > int64(nodeCap) && (int64(i)+1)*int64(nodeCap)/c == int64(i)*int64(nodeCap)/c {
				continue
			}
			if bound > 0 {
				d = min(d, bound)
			}
			durs = append(durs, uint32(d))
		}
	}
	out := refDistribution(durs)
	out.NodeCap = nodeCap
	slices.SortFunc(over, func(a, b NodeCount) int {
		if c := cmp.Compare(b.Records, a.Records); c != 0 {
			return c
		}
		return cmp.Compare(a.Node, b.Node)
	})
	if len(over) > 0 {
		out.Capped = over[:min(len(over), MaxEvidence)]
	}
	if bound > 0 {
		out.Bound = ms(bound)
		for _, b := range rel {
			if b.d > bound {
				out.Above = append(out.Above, *b.ev)
			}
		}
	}
	return out
}

// recommend fills out.Recommendation, or out.Thin with why not.
func (a *refAcc) recommend(out *Advice) {
	self := refOrder(a.selfBest)
	counted := out.Durations.Count
	switch {
	case out.Records == 0:
		out.Thin = "no released teardowns in the window for these nodes"
		return
	case counted < MinRecords && counted < out.Records:
		out.Thin = fmt.Sprintf("too thin: %d released teardowns in the window count (at most %d of a node), the advisor recommends from %d",
			counted, out.Durations.NodeCap, MinRecords)
		return
	case counted < MinRecords:
		out.Thin = fmt.Sprintf("too thin: %d released teardowns in the window, the advisor recommends from %d", out.Records, MinRecords)
		return
	case len(self) == 0:
		out.Thin = "no teardown in the window ended by itself (every one was signalled or unreported): nothing bounds G from below"
		return
	case len(self) < MinBacking:
		out.Thin = fmt.Sprintf("only one node's teardowns ended by themselves (%s, the longest %v): the advisor follows a value at least %d nodes reached",
			self[0].ev.Node, ms(self[0].d), MinBacking)
		return
	}
	drv := self[MinBacking-1]
	g, why := drv.d, DriverSelfEnded
	if out.FloorKnown && out.Floor.Ms > g {
		g, why = out.Floor.Ms, DriverFloor
	}
	g = (g + 999) / 1000 * 1000 // a whole second, at or above both
	r := &Recommendation{G: ms(g), Driver: why, LongestSelfEnded: drv.ev}
	for _, b := range self {
		if b.d > drv.d {
			r.Unbacked = append(r.Unbacked, *b.ev)
		}
		if b.d >= drv.d {
			r.SelfEndedBacking++
			if len(r.SelfEndedNodes) < MaxEvidence {
				r.SelfEndedNodes = append(r.SelfEndedNodes, b.ev.Node)
			}
		}
	}
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
	for _, d := range a.selfD {
		if d > g {
			r.FalseDrains++
		}
	}
	out.Recommendation = r
}

func refEvidence(r *history.Record) *Evidence {
	return &Evidence{Node: r.Node, Job: r.JobString(), User: orUnknown(r.User), Command: orUnknown(r.Command), Cause: r.Cause,
		Duration: ms(r.DurationMs()), Outcome: r.Outcome.String()}
}

// distribution computes the nearest-rank percentiles of d (reordering it).
func refDistribution(d []uint32) Distribution {
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
		refSel(d[:hi], v.r)
		*v.p = ms(int64(d[v.r]))
		hi = v.r + 1
	}
	return out
}

// sel reorders d so that d[k] is the k-th smallest, everything before it
// no larger (Hoare's quickselect, median of three).
func refSel(d []uint32, k int) {
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

// refTops counts long and hung teardowns by name.
type refTops struct{ m map[string]*Top }

func newRefTops() *refTops { return &refTops{m: map[string]*Top{}} }

func (t *refTops) add(name string, long, hung bool) {
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
func (t *refTops) top(n int) []Top {
	out := make([]Top, 0, len(t.m))
	for _, e := range t.m {
		out = append(out, *e)
	}
	slices.SortFunc(out, topOrder)
	return out[:min(len(out), n)]
}
