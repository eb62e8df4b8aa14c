package meshmodel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// The parameters must be memberlist's own DefaultLANConfig.
func TestDefaultLANIsMemberlists(t *testing.T) {
	c := memberlist.DefaultLANConfig()
	want := Params{
		ProbeInterval: c.ProbeInterval, ProbeTimeout: c.ProbeTimeout, IndirectChecks: c.IndirectChecks,
		SuspicionMult: c.SuspicionMult, SuspicionMaxTimeoutMult: c.SuspicionMaxTimeoutMult,
		GossipInterval: c.GossipInterval, GossipNodes: c.GossipNodes, RetransmitMult: c.RetransmitMult,
		PushPullInterval: c.PushPullInterval, Piggyback: true,
	}
	if got := DefaultLAN(); got != want {
		t.Fatalf("DefaultLAN() = %+v, memberlist's DefaultLANConfig has %+v", got, want)
	}
}

// Hard numbers worked out by hand from memberlist v0.7.0's util.go and
// suspicion.go with DefaultLANConfig (SuspicionMult 4, probe interval 1 s,
// max multiplier 6, RetransmitMult 4, push-pull 30 s).
func TestFormulas(t *testing.T) {
	p := DefaultLAN()
	for _, c := range []struct {
		n                    int
		suspicion, maxT      time.Duration
		k, retransmit        int
		pushPull             time.Duration
		afterOneConfirmation time.Duration
	}{
		// log10(n) truncated to thousandths, times 4 s.
		{n: 0, suspicion: 4 * time.Second, maxT: 24 * time.Second, k: 0, retransmit: 0, pushPull: 30 * time.Second, afterOneConfirmation: 4 * time.Second},
		{n: 3, suspicion: 4 * time.Second, maxT: 24 * time.Second, k: 0, retransmit: 4, pushPull: 30 * time.Second, afterOneConfirmation: 4 * time.Second},
		{n: 4, suspicion: 4 * time.Second, maxT: 24 * time.Second, k: 2, retransmit: 4, pushPull: 30 * time.Second, afterOneConfirmation: 11381 * time.Millisecond},
		{n: 50, suspicion: 6792 * time.Millisecond, maxT: 40752 * time.Millisecond, k: 2, retransmit: 8, pushPull: 60 * time.Second, afterOneConfirmation: 19325 * time.Millisecond},
		{n: 100, suspicion: 8 * time.Second, maxT: 48 * time.Second, k: 2, retransmit: 12, pushPull: 90 * time.Second, afterOneConfirmation: 22762 * time.Millisecond},
		{n: 400, suspicion: 10408 * time.Millisecond, maxT: 62448 * time.Millisecond, k: 2, retransmit: 12, pushPull: 150 * time.Second, afterOneConfirmation: 29614 * time.Millisecond},
		{n: 999, suspicion: 11996 * time.Millisecond, maxT: 71976 * time.Millisecond, k: 2, retransmit: 12, pushPull: 180 * time.Second, afterOneConfirmation: 34132 * time.Millisecond},
		{n: 1000, suspicion: 12 * time.Second, maxT: 72 * time.Second, k: 2, retransmit: 16, pushPull: 180 * time.Second, afterOneConfirmation: 34144 * time.Millisecond},
		{n: 10000, suspicion: 16 * time.Second, maxT: 96 * time.Second, k: 2, retransmit: 20, pushPull: 300 * time.Second, afterOneConfirmation: 45525 * time.Millisecond},
		{n: 20000, suspicion: 17204 * time.Millisecond, maxT: 103224 * time.Millisecond, k: 2, retransmit: 20, pushPull: 330 * time.Second, afterOneConfirmation: 48951 * time.Millisecond},
	} {
		t.Run(fmt.Sprint(c.n), func(t *testing.T) {
			if got := SuspicionTimeout(p.SuspicionMult, c.n, p.ProbeInterval); got != c.suspicion {
				t.Errorf("SuspicionTimeout = %v, want %v", got, c.suspicion)
			}
			minT, maxT, k := SuspicionBounds(p, c.n)
			if minT != c.suspicion || maxT != c.maxT || k != c.k {
				t.Errorf("SuspicionBounds = %v, %v, %d; want %v, %v, %d", minT, maxT, k, c.suspicion, c.maxT, c.k)
			}
			if got := SuspicionTimeoutAfter(1, k, minT, maxT); got != c.afterOneConfirmation {
				t.Errorf("SuspicionTimeoutAfter(1) = %v, want %v", got, c.afterOneConfirmation)
			}
			if got := SuspicionTimeoutAfter(k, k, minT, maxT); got != minT {
				t.Errorf("SuspicionTimeoutAfter(k) = %v, want the minimum %v", got, minT)
			}
			if got := RetransmitLimit(p.RetransmitMult, c.n); got != c.retransmit {
				t.Errorf("RetransmitLimit = %d, want %d", got, c.retransmit)
			}
			if got := PushPullPeriod(p.PushPullInterval, c.n); got != c.pushPull {
				t.Errorf("PushPullPeriod = %v, want %v", got, c.pushPull)
			}
		})
	}
	if got := SuspicionTimeoutAfter(0, 2, 12*time.Second, 72*time.Second); got != 72*time.Second {
		t.Errorf("SuspicionTimeoutAfter(0) = %v, want the maximum 72s", got)
	}
}

// With two members, the other gets the broadcast at the origin's first
// gossip tick (uniform over 200 ms), or before it at its first ping or ack
// (each uniform over 1 s): P(T > t) = (1 − t/0.2)(1 − t)² for t < 0.2 s,
// a mean of 0.2 − 7·0.2²/2 + 11·0.2³/3 − 5·0.2⁴/4 = 87.33 ms. Without
// piggybacking the mean is 100 ms; with four members and three gossip
// targets, all three get it at that tick.
func TestDisseminateSmall(t *testing.T) {
	for _, c := range []struct {
		piggyback bool
		mean      time.Duration
	}{{true, 87333 * time.Microsecond}, {false, 100 * time.Millisecond}} {
		t.Run(fmt.Sprintf("piggyback=%v", c.piggyback), func(t *testing.T) {
			p := DefaultLAN()
			p.Piggyback = c.piggyback
			rng := rand.New(rand.NewPCG(1, 2))
			const runs = 4000
			var sum time.Duration
			for range runs {
				at, sent := Disseminate(p, 2, rng)
				if at[1] < 0 || at[1] >= p.GossipInterval {
					t.Fatalf("2 members: the other got it at %v, want within [0, %v)", at[1], p.GossipInterval)
				}
				if want := RetransmitLimit(p.RetransmitMult, 2) * 2; sent != want {
					t.Fatalf("2 members: sent %d times, want %d (each member its limit)", sent, want)
				}
				sum += at[1]
			}
			if mean := sum / runs; mean < c.mean-4*time.Millisecond || mean > c.mean+4*time.Millisecond {
				t.Errorf("2 members: mean arrival %v, want %v ± 4ms", mean, c.mean)
			}
			if c.piggyback {
				return
			}
			for range 100 {
				s := SpreadOf(Disseminate(p, 4, rng))
				if s.Missed != 0 || s.First != s.Max {
					t.Fatalf("4 members: %+v, want all three at the origin's first tick", s)
				}
			}
		})
	}
}

// With few transmissions per member, the fraction a broadcast misses is
// the final size of the epidemic (MissedFraction).
func TestDisseminateMissedFraction(t *testing.T) {
	p := DefaultLAN()
	p.RetransmitMult = 1 // 4 transmissions at 2,000 members
	const n, runs = 2000, 30
	rng := rand.New(rand.NewPCG(3, 4))
	var missed float64
	for range runs {
		missed += SpreadOf(Disseminate(p, n, rng)).Missed
	}
	missed /= runs
	want := MissedFraction(p, n)
	if math.Abs(missed-want) > 0.1*want {
		t.Errorf("missed %.4f of members, the final-size equation gives %.4f (want within 10 %%)", missed, want)
	}
	if want < 0.015 || want > 0.025 {
		t.Errorf("MissedFraction = %.4f, want about exp(-4) = 0.018", want)
	}
}

func TestMonotonicInN(t *testing.T) {
	p := DefaultLAN()
	var prevC Spread
	var prevD Detection
	for _, n := range []int{50, 100, 400, 1000, 2000} {
		c := Converge(p, n, 7, 7)
		d := Detect(p, n, 3, 7)
		if c.P50 < prevC.P50 || c.Max < prevC.Max || c.Sent < prevC.Sent {
			t.Errorf("convergence at %d members %+v is faster than at fewer, %+v", n, c, prevC)
		}
		if d.FirstDead < prevD.FirstDead || d.P50 < prevD.P50 {
			t.Errorf("detection at %d members %+v is faster than at fewer, %+v", n, d, prevD)
		}
		prevC, prevD = c, d
	}
}

func TestDeterministic(t *testing.T) {
	p := DefaultLAN()
	if a, b := Converge(p, 500, 5, 42), Converge(p, 500, 5, 42); a != b {
		t.Errorf("Converge with one seed: %+v, then %+v", a, b)
	}
	if a, b := Detect(p, 500, 3, 42), Detect(p, 500, 3, 42); a != b {
		t.Errorf("Detect with one seed: %+v, then %+v", a, b)
	}
	if a, b := Converge(p, 500, 5, 42), Converge(p, 500, 5, 43); a == b {
		t.Errorf("Converge with two seeds gave the same %+v", a)
	}
}

// Detection sits where the formulas put it: the first suspicion about two
// probe intervals after the failure, death the suspicion timeout later
// (two confirmations arrive long before it runs out).
func TestDetectTimeline(t *testing.T) {
	p := DefaultLAN()
	d := Detect(p, 1000, 9, 1)
	if d.FirstSuspect < 1*time.Second || d.FirstSuspect > 4*time.Second {
		t.Errorf("first suspicion at %v, want within 1–4 s", d.FirstSuspect)
	}
	if d.Confirmations != 2 || d.FirstDead != d.FirstSuspect+12*time.Second {
		t.Errorf("%d confirmations, first dead at %v; want 2 and the first suspicion + 12 s (%v)",
			d.Confirmations, d.FirstDead, d.FirstSuspect+12*time.Second)
	}
	if d.P50 <= d.FirstDead || d.Max > d.FirstDead+5*time.Second {
		t.Errorf("members see it dead at p50 %v, max %v; want after the first dead %v and within 5 s of it", d.P50, d.Max, d.FirstDead)
	}
}

// BenchmarkModelTable prints the model's predictions for the sizes
// BENCHMARKS.md discusses (`make bench-scale`; 20,000 members take a few
// seconds):
//
//	go test -run '^$' -bench ModelTable -benchtime 1x -v ./internal/meshmodel/
func BenchmarkModelTable(t *testing.B) {
	p := DefaultLAN()
	const runs = 21
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nmodel: memberlist DefaultLANConfig, %d runs per size (medians), seed 1\n", runs)
	fmt.Fprintf(&sb, "| members | suspicion min / max | retransmits | push-pull period | first suspect | first dead | dead seen p50 / p99 / max | meta seen p50 / p99 / max | missed by a broadcast |\n")
	fmt.Fprintf(&sb, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, n := range []int{100, 400, 1000, 10000, 20000} {
		minT, maxT, _ := SuspicionBounds(p, n)
		d := Detect(p, n, runs, 1)
		c := Converge(p, n, runs, 1)
		fmt.Fprintf(&sb, "| %d | %v / %v | %d | %v | %v | %v | %v / %v / %v | %v / %v / %v | %.1e (sim %.1e) |\n",
			n, minT, maxT, RetransmitLimit(p.RetransmitMult, n), PushPullPeriod(p.PushPullInterval, n),
			r(d.FirstSuspect), r(d.FirstDead), r(d.P50), r(d.P99), r(d.Max), r(c.P50), r(c.P99), r(c.Max),
			MissedFraction(p, n), c.Missed)
	}
	t.Log(sb.String())
}

func r(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
