package advisor

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/history"
)

// What one node can move (docs/DESIGN.md §5d). A node's root holds the mesh
// key and the node's own signing key: it can send any teardown of its own,
// within the intake's bounds (history.MaxDurationMs, MaxFloorMs) and at its
// node's rate (a burst of 600, then one a second). So every quantity the
// recommendation rests on counts a node once, however much it sends:
//
//   - The longest self-ended teardown G follows is the MinBacking-th
//     longest of the nodes' own longest ones, never a value fewer than
//     MinBacking nodes reached. One node adding, raising or hiding its own
//     moves that order statistic by one place: with one lying node, G stays
//     between the third- and the first-longest of the other nodes' own
//     longest self-ended teardowns, so it never rises above what those
//     nodes alone gave under the rule of following the single longest. The
//     nodes past it (fewer than MinBacking) are named as not followed.
//   - The kill-path floor likewise: the MinBacking-th largest of the
//     nodes' floors.
//   - The percentiles count at most nodeCap records of a node (twice the
//     median node's; a node's excess thinned evenly over its own) and no
//     duration as longer than the MinBacking-th longest of the nodes' own
//     longest teardowns. One node then holds at most about 2/N of the
//     sample and lifts no duration past what another node saw: quantile q
//     moves at most to the other nodes' q·(1 + 2/N) quantile, and below
//     the second-longest node's longest teardown. An honest cluster, whose
//     nodes send like numbers, is counted whole.
//
// Weighed against: weighting every record by its node's count (every node
// counts as one whatever its load: a busy partition weighs as little as an
// idle one, and the percentiles stop describing the cluster's teardowns;
// the cap thins only the outliers); the cap alone (at 1,000 nodes p99.9 is
// one node's share, the 720 longest of 720,000: a capped liar still owns
// it, hence the bound by the MinBacking-th node); trimming a fixed share
// of the longest records (one node's rate, 86,400 a day, outnumbers any
// share of a small cluster's); a larger MinBacking (it tolerates
// MinBacking − 1 lying nodes, but ignores as many honest nodes' longest
// teardowns: the threat is one node's root, and 2 is the least that bounds
// it and costs an honest answer least: the single longest node's, named).

// MinBacking is how many nodes must reach a value for the advice to follow
// it: the longest self-ended teardown, the kill-path floor, the longest
// duration the percentiles count.
const MinBacking = 2

// leadersLen is how many nodes leaders keeps with their evidence: those
// past the MinBacking-th and MaxEvidence that reach it.
const leadersLen = MaxEvidence + MinBacking

// NodeCount is one node's count of records.
type NodeCount struct {
	Node    string
	Records int
}

// nodeBest is one node's longest teardown of a kind, with its evidence.
type nodeBest struct {
	node int32
	d    int64
	ev   kept
}

// leaders keeps each node's longest teardown of one kind (best, by node
// index; -1 none) and the leadersLen nodes with the longest, longest first
// and, among equal ones, by name (top: whatever order the nodes' updates
// arrived in), each with its longest (the first that long) as evidence.
type leaders struct {
	best []int64
	top  []nodeBest
}

// offer takes node's teardown of d ms (r, read for its evidence only when
// it enters top) and reports whether it is the node's new longest. It runs
// for every record: what is not returns at once.
func (l *leaders) offer(node int32, d int64, r *history.Raw) bool {
	if int(node) < len(l.best) && d <= l.best[node] {
		return false
	}
	l.raise(node, d, r)
	return true
}

// raise makes d node's longest.
func (l *leaders) raise(node int32, d int64, r *history.Raw) {
	for int(node) >= len(l.best) {
		l.best = append(l.best, -1)
	}
	l.best[node] = d
	if i := slices.IndexFunc(l.top, func(b nodeBest) bool { return b.node == node }); i >= 0 {
		l.top = slices.Delete(l.top, i, i+1)
	}
	name := r.Str(r.Node)
	before := func(b nodeBest) bool { return d > b.d || d == b.d && name < b.ev.node }
	if len(l.top) >= leadersLen && !before(l.top[len(l.top)-1]) {
		return
	}
	i := sort.Search(len(l.top), func(i int) bool { return before(l.top[i]) })
	l.top = slices.Insert(l.top, i, nodeBest{node: node, d: d, ev: keep(r, d)})
	l.top = l.top[:min(len(l.top), leadersLen)]
}

// kth returns the k-th longest of the nodes' own longest (k from 1): the
// longest that k nodes reached; nil when fewer nodes have one.
func (l *leaders) kth(k int) *nodeBest {
	if len(l.top) < k {
		return nil
	}
	return &l.top[k-1]
}

// reaching counts the nodes whose longest is at least v, and names the
// first MaxEvidence of them, longest first.
func (l *leaders) reaching(v int64) (int, []string) {
	n := 0
	for _, b := range l.best {
		if b >= v {
			n++
		}
	}
	var names []string
	for _, b := range l.top {
		if b.d >= v && len(names) < MaxEvidence {
			names = append(names, b.ev.node)
		}
	}
	return n, names
}

// above returns the evidence of the nodes whose longest is past v (fewer
// than MinBacking when v is the MinBacking-th), longest first.
func (l *leaders) above(v int64) []Evidence {
	var out []Evidence
	for _, b := range l.top {
		if b.d > v {
			out = append(out, *b.ev.evidence())
		}
	}
	return out
}

// nodeShare returns how the percentiles count the records: counts[i] is
// node i's records (0: none in the answer). The cap is twice the median of
// the nodes' counts (the lower median: one node moves it by one place);
// counts is nil when no node is over it (every record counts). The bound
// is the MinBacking-th longest of the nodes' own longest (rel), 0 when
// fewer nodes have records.
func nodeShare(counts []int, rel *leaders) *counting {
	var nz []int
	for _, c := range counts {
		if c > 0 {
			nz = append(nz, c)
		}
	}
	c := &counting{}
	if b := rel.kth(MinBacking); b != nil {
		c.bound = uint32(min(b.d, history.MaxDurationMs))
	}
	if len(nz) == 0 {
		return c
	}
	slices.Sort(nz)
	c.nodeCap = 2 * nz[(len(nz)-1)/2]
	if nz[len(nz)-1] > c.nodeCap {
		c.counts = counts
	}
	return c
}

// capped lists the nodes over the cap, most records first (then by name),
// at most MaxEvidence.
func capped(c *counting, nodes *names) []NodeCount {
	var out []NodeCount
	for i, n := range c.counts {
		if n > c.nodeCap {
			out = append(out, NodeCount{Node: nodes.list[i], Records: n})
		}
	}
	slices.SortFunc(out, func(a, b NodeCount) int {
		if c := cmp.Compare(b.Records, a.Records); c != 0 {
			return c
		}
		return cmp.Compare(a.Node, b.Node)
	})
	return out[:min(len(out), MaxEvidence)]
}

// floorOf returns the floor the advice follows: the MinBacking-th largest
// floor of the set's nodes (a floor within (0, history.MaxFloorMs]; the
// intake refuses others), with the count and the first names of the nodes
// whose floor reaches it and the floors past it; or, when fewer than
// MinBacking nodes sent one, known false and those floors as above.
func floorOf(floors []Floor, keep func(string) bool) (f Floor, known bool, backing int, names []string, above []Floor) {
	var fs []Floor
	for _, f := range floors {
		if f.Ms > 0 && f.Ms <= history.MaxFloorMs && keep(f.Node) {
			fs = append(fs, f)
		}
	}
	slices.SortFunc(fs, func(a, b Floor) int {
		if c := cmp.Compare(b.Ms, a.Ms); c != 0 {
			return c
		}
		return cmp.Compare(a.Node, b.Node)
	})
	if len(fs) < MinBacking {
		return Floor{}, false, 0, nil, fs
	}
	f = fs[MinBacking-1]
	for _, g := range fs {
		switch {
		case g.Ms > f.Ms:
			above = append(above, g)
		case g.Ms == f.Ms:
		default:
			return f, true, backing, names, above
		}
		backing++
		if len(names) < MaxEvidence {
			names = append(names, g.Node)
		}
	}
	return f, true, backing, names, above
}

// floorNote says why a floor sent by fewer than MinBacking nodes is not
// followed.
func floorNote(lone []Floor) string {
	f := lone[0]
	return fmt.Sprintf("kill-path floor unknown: only %d node sent one (%s: %v, %s), and the advice follows a floor at least %d nodes report",
		len(lone), f.Node, ms(f.Ms), f.Path, MinBacking)
}

// Saturating arithmetic on milliseconds: the values are bounded at the
// intake, but the advisor is a library and no input of its own makes it
// wrap.

func satAdd(a, b int64) int64 {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}

func satSub(a, b int64) int64 {
	if b == math.MinInt64 {
		if a >= 0 {
			return math.MaxInt64
		}
		return a - b
	}
	return satAdd(a, -b)
}

func satMul(a int64, n int) int64 {
	if a == 0 || n == 0 {
		return 0
	}
	p := a * int64(n)
	if p/int64(n) != a || (a == -1 && int64(n) == math.MinInt64) {
		if (a < 0) != (n < 0) {
			return math.MinInt64
		}
		return math.MaxInt64
	}
	return p
}

// wholeSecond rounds ms up to a whole second (ms within the bounds).
func wholeSecond(v int64) int64 {
	if v >= math.MaxInt64-999 {
		return v / 1000 * 1000
	}
	return (v + 999) / 1000 * 1000
}

// ms converts milliseconds to a Duration, saturating (292 years).
func ms(v int64) time.Duration {
	const lim = math.MaxInt64 / int64(time.Millisecond)
	switch {
	case v > lim:
		return math.MaxInt64
	case v < -lim:
		return math.MinInt64
	}
	return time.Duration(v) * time.Millisecond
}
