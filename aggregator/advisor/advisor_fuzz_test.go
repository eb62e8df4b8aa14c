package advisor

import (
	"encoding/binary"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/history"
)

// FuzzAdvise feeds the advisor records of any stored value (durations up
// to the file's 32 bits, every outcome, few nodes so that they meet),
// floors, a running teardown's start and a candidate of any int64: it never
// panics, and its answer holds no wrapped value. A recommended G is a
// whole second, at or above its driving teardown and floor, and within the
// bounds of a record and a floor; the percentiles are ordered; no sum of
// node time is negative.
func FuzzAdvise(f *testing.F) {
	f.Add([]byte("0123456789abcdef0123456789abcdef"), int64(95_000), int64(9223372036854775000), int64(0), int64(time.Minute))
	f.Add(make([]byte, 400), int64(math.MaxInt64), int64(math.MaxInt64-807), int64(math.MinInt64), int64(math.MaxInt64))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 2}, int64(-1), int64(1), int64(1), int64(-1))
	f.Fuzz(func(t *testing.T, data []byte, floorA, floorB, runStart, cand int64) {
		strs := []string{"n0", "n1", "n2", "n3", "n4", "alice", "epilog"}
		recs := make([]history.Raw, 0, len(data)/6+60)
		for i := 0; i+6 <= len(data); i += 6 {
			p := data[i:]
			recs = append(recs, history.Raw{Outcome: history.Outcome(p[0] % 6), Node: uint32(p[1]%5) + 1, User: 6, Command: 7,
				StartMs: 1000 + int64(i), DurationMs: int64(binary.LittleEndian.Uint32(p[2:])), GraceMs: 120_000, Strs: strs})
		}
		// Enough self-ended ones on three nodes to recommend from.
		for i := range 60 {
			recs = append(recs, history.Raw{Outcome: history.OutcomeClean, Node: uint32(i%3) + 1, User: 6, Command: 7,
				StartMs: 2000 + int64(i), DurationMs: int64(i) * 1000, GraceMs: 120_000, Strs: strs})
		}
		src := func(fromMs, toMs int64, fn func(r *history.Raw) bool) error {
			for i := range recs {
				r := recs[i]
				r.Job = strconv.AppendInt(nil, int64(i), 10)
				if r.StartMs >= fromMs && r.StartMs < toMs && !fn(&r) {
					return nil
				}
			}
			return nil
		}
		floors := []Floor{{Node: "n0", Ms: floorA, Path: "a"}, {Node: "n1", Ms: floorB, Path: "b"}, {Node: "n2", Ms: 95_000, Path: "c"}}
		running := []Running{{Node: "n3", Job: "r", StartMs: runStart, GraceMs: 120_000}}
		q := Query{FromMs: 0, ToMs: math.MaxInt64, NowMs: 1 << 40, InForce: time.Duration(cand), Candidates: []time.Duration{time.Duration(cand), time.Minute}}
		a, err := Advise(q, src, running, floors)
		if err != nil {
			t.Fatal(err)
		}
		d := a.Durations
		if d.P50 < 0 || d.P50 > d.P99 || d.P99 > d.P999 || d.P999 > d.Max {
			t.Errorf("durations %+v", d)
		}
		for _, c := range a.Candidates {
			if c.PlannedWrong < 0 || c.Overdue < 0 || c.Nodes < 0 {
				t.Errorf("candidate %+v", c)
			}
		}
		if lr := a.LongestRunning; lr != nil && lr.Duration < 0 {
			t.Errorf("longest running %+v", lr)
		}
		r := a.Recommendation
		if r == nil {
			return
		}
		bound := time.Duration(max(history.MaxDurationMs, history.MaxFloorMs)) * time.Millisecond
		if r.G <= 0 || r.G%time.Second != 0 || r.G > bound {
			t.Errorf("G %v: want a whole second in (0, %v]", r.G, bound)
		}
		if e := r.LongestSelfEnded; e != nil && r.G < e.Duration {
			t.Errorf("G %v below its driving teardown %v", r.G, e.Duration)
		}
		if a.FloorKnown && r.G < time.Duration(a.Floor.Ms)*time.Millisecond {
			t.Errorf("G %v below the floor %d ms", r.G, a.Floor.Ms)
		}
	})
}
