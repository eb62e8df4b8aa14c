package advisor

// The advisor as first written (a map per node, user and command, records
// with their strings, a sort-free but reordering quickselect, a second
// scan for the top lists), kept as the reference the fast one must agree
// with on every answer (TestAdviseMatchesReference).

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/history"
)

type refSource func(fromMs, toMs int64, fn func(r *history.Record) bool) error

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
	a := &refAcc{q: q, nodeMax: map[string]int64{}}
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
		d := r.DurationMs()
		a.add(r.Node, d, r.Outcome, false)
		a.durs = append(a.durs, uint32(min(max(d, 0), math.MaxUint32)))
		a.outcomes[r.Outcome]++
		if r.Outcome.SelfEnded() && (a.longestSelf == nil || d > a.longestSelfD) {
			a.longestSelf, a.longestSelfD = refEvidence(r), d
		}
		switch r.Outcome {
		case history.OutcomeHung:
			a.hung = append(a.hung, *refEvidence(r))
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
	out.Durations = refDistribution(a.durs)
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

// recommend fills out.Recommendation, or out.Thin with why not.
func (a *refAcc) recommend(out *Advice) {
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
