package advisor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/history"
)

// The advice one node cannot steer (docs/DESIGN.md §5d): a cluster of
// honest nodes and one liar that sends, at its node's full rate, the most
// the intake lets through.

// cluster synthesizes a window of records without a store: nodes honest
// nodes, one record each per hour for days, durations of a log-normal
// spread (median 20 s, a tail to tens of minutes), self-ended (clean
// within G, exited past it: nodes that observe), one in 2,000 hung; and
// optionally a liar that sends liarN records of liarMs each, outcome
// liarOut. It is a Source: every scan gives the same records in the same
// order.
type cluster struct {
	nodes, days int
	fromMs      int64
	liarN       int
	liarMs      int64
	liarOut     history.Outcome
	// replace: the liar is this honest node (its own records replaced);
	// -1: it is a node of its own.
	replace int
	strs    []string
}

const liarName = "evil"

func newCluster(nodes, days int, fromMs int64) *cluster {
	c := &cluster{nodes: nodes, days: days, fromMs: fromMs, replace: -1}
	for i := range nodes {
		c.strs = append(c.strs, fmt.Sprintf("node%04d", i))
	}
	c.strs = append(c.strs, liarName, "alice", "epilog")
	return c
}

func (c *cluster) honestMs(rng *rand.Rand) (int64, history.Outcome) {
	d := int64(20_000 * math.Exp(rng.NormFloat64()))
	d = max(d, 100)
	switch {
	case rng.IntN(2000) == 0:
		return d + 600_000, history.OutcomeHung
	case d > 120_000:
		return d, history.OutcomeExited
	}
	return d, history.OutcomeClean
}

func (c *cluster) source(fromMs, toMs int64, fn func(r *history.Raw) bool) error {
	rng := rand.New(rand.NewPCG(7, 11))
	n := uint32(c.nodes)
	r := history.Raw{User: n + 2, Command: n + 3, GraceMs: 120_000, Strs: c.strs}
	job := make([]byte, 0, 16)
	emit := func(node uint32, start, d int64, o history.Outcome, j int) bool {
		if start < fromMs || start >= toMs {
			return true
		}
		r.Node, r.StartMs, r.DurationMs, r.Outcome = node, start, d, o
		r.Job = strconv.AppendInt(job[:0], int64(j), 10)
		return fn(&r)
	}
	for h := range c.days * 24 {
		for i := range c.nodes {
			d, o := c.honestMs(rng)
			if i == c.replace {
				continue
			}
			if !emit(uint32(i+1), c.fromMs+int64(h)*3600_000+int64(i), d, o, h*c.nodes+i) {
				return nil
			}
		}
	}
	liar := n + 1
	if c.replace >= 0 {
		liar = uint32(c.replace) + 1
	}
	// The liar's records at its node's rate bound: the burst at once, then
	// one a second.
	for j := range c.liarN {
		start := c.fromMs + max(int64(j-history.DefaultNodeBurst), 0)*1000
		if !emit(liar, start, c.liarMs, c.liarOut, 1e9+j) {
			return nil
		}
	}
	return nil
}

// honest is what the test knows of the honest records: each node's
// longest self-ended teardown and every duration, sorted, and the node
// with the longest.
type honest struct {
	selfMax []int64 // longest first
	durs    []int64 // ascending
	longest int
}

func (c *cluster) honest() honest {
	var h honest
	per := make([]int64, c.nodes)
	rng := rand.New(rand.NewPCG(7, 11))
	for range c.days * 24 {
		for i := range c.nodes {
			d, o := c.honestMs(rng)
			if i == c.replace {
				continue
			}
			h.durs = append(h.durs, d)
			if o.SelfEnded() {
				per[i] = max(per[i], d)
			}
		}
	}
	if c.replace >= 0 {
		per = slices.Delete(per, c.replace, c.replace+1)
	}
	h.longest = slices.Index(per, slices.Max(per))
	slices.Sort(h.durs)
	slices.SortFunc(per, func(a, b int64) int { return int(b - a) })
	h.selfMax = per
	return h
}

// upToSecond is ms rounded up to a whole second.
func upToSecond(ms int64) time.Duration {
	return time.Duration((ms+999)/1000) * time.Second
}

// TestOneNodeCannotSteer: 1,000 honest nodes (one record an hour each for
// 30 days: 720,000, the kill-path floor 95 s on every one) and one liar.
// The liar sends its node's whole rate bound (the burst of 600, then one a
// second: 2,592,600 records over the window) at the largest values the
// intake lets through (a self-ended teardown of the record bound, the
// largest floor), or at the smallest (1 ms, to drag the percentiles down),
// or it is one of the 1,000 (the one with the longest self-ended
// teardown) and hides it (it sends a few of 1 ms instead, and no floor).
// The recommended G stays between the third- and
// the first-longest of the honest nodes' own longest self-ended
// teardowns: never above what the honest nodes alone said under the
// unbounded rule; p99.9 stays within the records one node counts for.
func TestOneNodeCannotSteer(t *testing.T) {
	const nodes, days = 1000, 30
	from := t0.Add(-days * 24 * time.Hour).UnixMilli()
	q := Query{FromMs: from, ToMs: t0.UnixMilli(), NowMs: t0.UnixMilli(), InForce: 2 * time.Minute}
	floorsOf := func(liar int64) []Floor {
		fs := make([]Floor, 0, nodes+1)
		for i := range nodes {
			fs = append(fs, Floor{Node: fmt.Sprintf("node%04d", i), Ms: 95_000, Path: "slurm"})
		}
		if liar != 0 {
			fs = append(fs, Floor{Node: liarName, Ms: liar, Path: "slurm: lies"})
		}
		return fs
	}
	base := newCluster(nodes, days, from)
	h := base.honest()
	clean, err := Advise(q, base.source, nil, floorsOf(0))
	if err != nil {
		t.Fatal(err)
	}
	if clean.Recommendation == nil {
		t.Fatalf("no recommendation from the honest nodes: %s", clean.Thin)
	}
	m1, m2, m3 := h.selfMax[0], h.selfMax[1], h.selfMax[2]
	hi, lo := upToSecond(max(m1, 95_000)), upToSecond(max(m3, 95_000))
	t.Logf("honest: %d records, G %v (longest self-ended per node: %v, %v, %v), p99.9 %v", clean.Records, clean.Recommendation.G,
		ms(m1), ms(m2), ms(m3), clean.Durations.P999)
	// The records one node counts for in the percentiles: twice the
	// median node's (720).
	const nodeCap = 2 * days * 24
	worst := time.Duration(0)
	rate := history.DefaultNodeBurst + days*24*3600 // the liar's records over the window
	for _, tc := range []struct {
		name    string
		n       int
		d       int64
		o       history.Outcome
		floor   int64
		replace bool
	}{
		{"largest values", rate, history.MaxDurationMs, history.OutcomeExited, history.MaxFloorMs, false},
		{"overflowing floor", 100, 60_000, history.OutcomeClean, math.MaxInt64 - 807, false},
		{"just past the longest honest one", rate, m1 + 1000, history.OutcomeClean, m1 + 1000, false},
		{"smallest values", rate, 1, history.OutcomeClean, 1, false},
		{"hides the longest", 10, 1, history.OutcomeClean, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(nodes, days, from)
			c.liarN, c.liarMs, c.liarOut = tc.n, tc.d, tc.o
			floors := floorsOf(tc.floor)
			h, hi, lo := h, hi, lo
			if tc.replace {
				c.replace = h.longest
				floors = slices.Delete(floors, h.longest, h.longest+1) // it sends no floor
				h = c.honest()
				hi, lo = upToSecond(max(h.selfMax[0], 95_000)), upToSecond(max(h.selfMax[2], 95_000))
			}
			a, err := Advise(q, c.source, nil, floors)
			if err != nil {
				t.Fatal(err)
			}
			r := a.Recommendation
			if r == nil {
				t.Fatalf("no recommendation: %s", a.Thin)
			}
			if r.G < lo || r.G > hi {
				t.Errorf("G %v with the liar, want within [%v, %v] (honest G %v)", r.G, lo, hi, clean.Recommendation.G)
			}
			if tc.d == history.MaxDurationMs {
				// The answer names the liar wherever it was held back.
				d := a.Durations
				if len(d.Capped) == 0 || d.Capped[0] != (NodeCount{liarName, tc.n}) || len(d.Above) == 0 || d.Above[0].Node != liarName ||
					len(r.Unbacked) == 0 || r.Unbacked[0].Node != liarName || len(a.FloorAbove) == 0 || a.FloorAbove[0].Node != liarName {
					t.Errorf("the liar is not named: capped %v, above %v, not followed %v, floors not followed %v", d.Capped, d.Above, r.Unbacked, a.FloorAbove)
				}
			}
			moved := r.G - clean.Recommendation.G
			worst = max(worst, moved, -moved)
			// p99.9 with the liar's records as they count (at most the
			// cap) all at the top, or all at the bottom of the honest ones.
			l := min(tc.n, nodeCap)
			rank := int(math.Ceil(0.999*float64(len(h.durs)+l))) - 1
			top, bottom := ms(h.durs[min(rank, len(h.durs)-1)]), ms(h.durs[max(rank-l, 0)])
			if p := a.Durations.P999; p > top || p < bottom {
				t.Errorf("p99.9 %v with the liar, want within [%v, %v] (honest %v)", p, bottom, top, clean.Durations.P999)
			}
			t.Logf("%s: G %v (moved %v; bound [%v, %v]), p99.9 %v (honest %v, bound [%v, %v])", tc.name, r.G, moved, lo, hi,
				a.Durations.P999, clean.Durations.P999, bottom, top)
		})
	}
	t.Logf("the liar moved G by at most %v", worst)
}
