package advisor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/history"
)

var t0 = time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)

// randomStore writes n random teardowns into a store of small segments
// (so that scans cross many segments and their string tables): durations
// with many ties, a few past 65.5 s blocks and up to the bound (8 days),
// every outcome, users and commands missing or not.
func randomStore(t *testing.T, rng *rand.Rand, seed uint64, n int) *history.Store {
	t.Helper()
	st, err := history.Open(history.Options{Dir: t.TempDir(), MaxBytes: 64 << 20, NodeRate: 1e9, NodeBurst: 1 << 30}, t0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	users := []string{"", "alice", "bob", "carol", "unknown"}
	cmds := []string{"", "epilog", "lfs", "umount"}
	for i := range n {
		var d int64
		switch rng.IntN(10) {
		case 0:
			d = rng.Int64N(history.MaxDurationMs + 1)
		case 1, 2:
			d = rng.Int64N(400_000)
		default:
			d = 1000 * rng.Int64N(90)
		}
		o := history.Outcome(rng.IntN(6))
		if rng.IntN(3) > 0 {
			o = history.OutcomeClean
		}
		if o.SelfEnded() && seed%2 == 0 {
			d = min(d, 100_000+rng.Int64N(20_000)) // the longest self-ended near 2 min: G in the thick of the others
		}
		// Starts in order (as nodes report them), over 60 days.
		s := t0.Add(-60*24*time.Hour).UnixMilli() + int64(i)*(60*24*3600*1000)/int64(n)
		d = min(d, t0.UnixMilli()-s)
		r := history.Record{Node: fmt.Sprintf("n%d", rng.IntN(30)), Job: fmt.Appendf(nil, "%d", i), User: users[rng.IntN(len(users))],
			Command: cmds[rng.IntN(len(cmds))], Cause: "wchan x", StartMs: s, ReleasedMs: s + d, GraceMs: 60000, Outcome: o}
		if why := st.Add(r, t0); why != "" {
			t.Fatalf("record %d: %s", i, why)
		}
	}
	if err := st.Flush(t0); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestAdviseMatchesReference: the advisor's answers equal the reference
// implementation's (ref_test.go) over random histories and queries: the
// whole window and parts of it, node sets, given candidates and top G,
// running teardowns, floors, with nodes over the percentiles' cap (their
// share thinned in a second scan) and with the pending list overflowing
// (another).
func TestAdviseMatchesReference(t *testing.T) {
	capped := 0 // answers with a node over the percentiles' cap (a second scan)
	for seed := range uint64(12) {
		rng := rand.New(rand.NewPCG(seed, 17))
		n := []int{0, 30, 60, 3000, 20000}[seed%5]
		st := randomStore(t, rng, seed, n)
		if seed%4 == 3 {
			old := maxPending
			maxPending = 10
			t.Cleanup(func() { maxPending = old })
		} else {
			maxPending = 1 << 20
		}
		var running []Running
		for i := range rng.IntN(4) {
			running = append(running, Running{Node: fmt.Sprintf("n%d", rng.IntN(35)), Job: fmt.Sprint(1e6 + i), User: []string{"", "dave", "alice"}[rng.IntN(3)],
				StartMs: t0.Add(-time.Duration(rng.Int64N(int64(time.Hour)))).UnixMilli(), GraceMs: 60000})
		}
		var floors []Floor
		if rng.IntN(2) == 0 {
			floors = []Floor{{Node: "n3", Ms: rng.Int64N(200_000), Path: "slurm"}, {Node: "n7", Ms: 95000, Path: "flux"}}
		}
		qs := []Query{
			{FromMs: 0, ToMs: t0.UnixMilli() + 1, InForce: 2 * time.Minute},
			{FromMs: t0.Add(-24 * time.Hour).UnixMilli(), ToMs: t0.UnixMilli(), InForce: 90 * time.Second, TopN: 3},
			{FromMs: t0.Add(-40 * 24 * time.Hour).UnixMilli(), ToMs: t0.Add(-10 * 24 * time.Hour).UnixMilli(), Candidates: []time.Duration{5 * time.Second, time.Minute, 77 * time.Second}},
			{FromMs: 0, ToMs: t0.UnixMilli() + 1, InForce: time.Minute, TopG: 30 * time.Second, Nodes: func(n string) bool { return n < "n2" }},
			{FromMs: 0, ToMs: t0.UnixMilli() + 1, Nodes: func(n string) bool { return n == "n5" || n == "n33" }},
		}
		for i, q := range qs {
			q.NowMs = t0.UnixMilli()
			got, err := Advise(q, st.ScanRaw, running, floors)
			if err != nil {
				t.Fatal(err)
			}
			want, err := refAdvise(q, st.Scan, running, floors)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Durations.Capped) > 0 {
				capped++
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("seed %d (%d records), query %d:\n got %+v\nwant %+v", seed, n, i, got, want)
				if !reflect.DeepEqual(got.Recommendation, want.Recommendation) {
					t.Errorf("recommendation\n got %+v\nwant %+v", got.Recommendation, want.Recommendation)
				}
			}
		}
	}
	if capped == 0 {
		t.Error("no answer had a node over the cap: the thinned percentiles were not compared")
	}
}

// TestDistribution: the radix selection equals sorting, on values that
// share blocks, straddle them, repeat, and reach the 32-bit bound.
func TestDistribution(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 3, 999, 1000, 1001, 54321, 200_000} { // past a block of 64 Ki
		for _, spread := range []uint32{1, 3, 70_000, 1 << 20, 1<<32 - 1} {
			d := make([]uint32, n)
			for i := range d {
				d[i] = uint32(rng.Uint64N(uint64(spread) + 1))
			}
			if n > 3 {
				d[0] = 1<<32 - 1
			}
			s := slices.Clone(d)
			slices.Sort(s)
			at := func(p float64) time.Duration {
				r := int(math.Ceil(float64(n) * p))
				return ms(int64(s[max(r, 1)-1]))
			}
			want := Distribution{Count: n, P50: at(0.5), P99: at(0.99), P999: at(0.999), Max: ms(int64(s[n-1]))}
			var dd durations
			for _, v := range d {
				dd.add(v)
			}
			if got := distribution(&dd, &counting{}); !reflect.DeepEqual(got, want) {
				t.Errorf("n %d spread %d: got %+v, want %+v", n, spread, got, want)
			}
		}
	}
}
