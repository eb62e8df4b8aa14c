// Package meshmodel predicts how long hashicorp/memberlist (v0.7.0, the
// version in go.mod) takes to detect a failed member and to spread a
// change to every member, for cluster sizes that cannot be run on one
// machine (10,000 and 20,000 nodes), from memberlist's own timing rules:
// the formulas of its util.go and suspicion.go, reproduced here with the
// same arithmetic, and a Monte-Carlo simulation of its gossip.
//
// What the model leaves out: CPU and network delays (a message takes
// Params.Latency from sender to receiver, and a member never falls behind
// its tickers), lost packets, and Lifeguard's awareness, which stretches
// an unhealthy member's probe interval. It describes a healthy cluster
// with one failure or one change at a time; BENCHMARKS.md compares it
// with measurements of up to 1,000 real members.
//
// Everything here is pure computation and safe for concurrent use.
package meshmodel

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Params are the memberlist settings that timing depends on (fields of
// memberlist.Config of the same names), and a one-way message latency.
type Params struct {
	ProbeInterval           time.Duration
	ProbeTimeout            time.Duration
	IndirectChecks          int
	SuspicionMult           int
	SuspicionMaxTimeoutMult int
	GossipInterval          time.Duration
	GossipNodes             int
	RetransmitMult          int
	PushPullInterval        time.Duration
	// Piggyback: memberlist also attaches queued broadcasts to the pings
	// and acks it sends (net.go's sendMsg), about one of each per member
	// per probe interval, and they count against the same retransmit
	// limit. True in DefaultLAN; false leaves only the gossip ticks.
	Piggyback bool
	// Latency is the one-way delay of a message (0: loopback).
	Latency time.Duration
}

// DefaultLAN is memberlist.DefaultLANConfig's timing (the profile "lan"
// of package mesh).
func DefaultLAN() Params {
	return Params{
		ProbeInterval:           time.Second,
		ProbeTimeout:            500 * time.Millisecond,
		IndirectChecks:          3,
		SuspicionMult:           4,
		SuspicionMaxTimeoutMult: 6,
		GossipInterval:          200 * time.Millisecond,
		GossipNodes:             3,
		RetransmitMult:          4,
		PushPullInterval:        30 * time.Second,
		Piggyback:               true,
	}
}

// pushPullScaleThreshold is memberlist's: push-pulls are not slowed down
// below 32 members.
const pushPullScaleThreshold = 32

// SuspicionTimeout is the shortest time a suspected member of a cluster of
// n is given to refute before it is declared dead, as memberlist's
// util.go computes it (the same arithmetic, truncation included):
//
//	nodeScale := math.Max(1.0, math.Log10(math.Max(1.0, float64(n))))
//	timeout := time.Duration(suspicionMult) * time.Duration(nodeScale*1000) * interval / 1000
//
// With DefaultLAN, 4·log10(n) probe intervals: 12 s at 1,000 members.
func SuspicionTimeout(suspicionMult, n int, interval time.Duration) time.Duration {
	nodeScale := math.Max(1.0, math.Log10(math.Max(1.0, float64(n))))
	return time.Duration(suspicionMult) * time.Duration(nodeScale*1000) * interval / 1000
}

// SuspicionBounds are the suspicion timer's bounds at n members and the
// number of independent confirmations that bring it down to the minimum,
// as memberlist's suspectNode sets them: min is SuspicionTimeout, max is
// SuspicionMaxTimeoutMult·min, k is SuspicionMult−2 (0 when n−2 < k).
func SuspicionBounds(p Params, n int) (minT, maxT time.Duration, k int) {
	k = p.SuspicionMult - 2
	if n-2 < k {
		k = 0
	}
	minT = SuspicionTimeout(p.SuspicionMult, n, p.ProbeInterval)
	return minT, time.Duration(p.SuspicionMaxTimeoutMult) * minT, k
}

// SuspicionTimeoutAfter is the total time (from the start of the
// suspicion) a suspicion timer runs once it holds c confirmations besides
// the first suspector's: Lifeguard's formula from memberlist's
// suspicion.go (remainingSuspicionTime without the elapsed part):
//
//	frac := math.Log(float64(n)+1.0) / math.Log(float64(k)+1.0)
//	raw := max.Seconds() - frac*(max.Seconds()-min.Seconds())
//	timeout := time.Duration(math.Floor(1000.0*raw)) * time.Millisecond
//
// bounded below by min. With k < 1 the timer is min from the start.
func SuspicionTimeoutAfter(c, k int, minT, maxT time.Duration) time.Duration {
	if k < 1 {
		return minT
	}
	frac := math.Log(float64(c)+1.0) / math.Log(float64(k)+1.0)
	raw := maxT.Seconds() - frac*(maxT.Seconds()-minT.Seconds())
	return max(time.Duration(math.Floor(1000.0*raw))*time.Millisecond, minT)
}

// RetransmitLimit is how many times each member sends a broadcast it
// learned (memberlist's util.go): retransmitMult·⌈log10(n+1)⌉, 16 at
// 1,000 members and 20 at 10,000 and 20,000 with DefaultLAN.
func RetransmitLimit(retransmitMult, n int) int {
	return retransmitMult * int(math.Ceil(math.Log10(float64(n+1))))
}

// PushPullPeriod is the interval of each member's full state exchange at
// n members (memberlist's pushPullScale): the interval up to 32 members,
// then multiplied by ⌈log2 n − log2 32⌉ + 1: 3 min at 1,000, 5 min at
// 10,000 and 5.5 min at 20,000 with DefaultLAN.
func PushPullPeriod(interval time.Duration, n int) time.Duration {
	if n <= pushPullScaleThreshold {
		return interval
	}
	mult := math.Ceil(math.Log2(float64(n))-math.Log2(pushPullScaleThreshold)) + 1.0
	return time.Duration(mult) * interval
}

// Spread is the outcome of one broadcast, from the moment its origin
// queues it, over the n−1 other members.
type Spread struct {
	// P50, P99 and Max are when half, 99 % and all of those that got it
	// got it; First is the first.
	First, P50, P99, Max time.Duration
	// Missed is the fraction of the other members it never reached (they
	// learn it at a push-pull).
	Missed float64
	// Sent is how many times it was sent in all.
	Sent int
}

// Disseminate simulates one broadcast in a cluster of n members and
// returns, for each member, when it got it (member 0 is the origin, at 0;
// -1 for a member it never reached), and how many times it was sent.
//
// The simulation follows memberlist's gossip: every member runs a ticker
// of period GossipInterval with its own random phase; at each tick a
// member holding the message with transmissions left picks GossipNodes
// distinct random members other than itself (kRandomNodes; it does not
// know who has the message already) and sends it to each in turn, one
// transmission each (the TransmitLimitedQueue counts every
// GetBroadcasts), until RetransmitLimit transmissions are spent. With
// Piggyback, each member also sends it, while transmissions are left, on
// its ping (its probe ticker, period ProbeInterval, to the member it
// probes: round-robin over a shuffled list, so a random one) and on an
// ack (modelled as a second ticker of period ProbeInterval to a random
// member: it answers about one ping a second, from random members). A
// member that gets it for the first time queues it and sends it from its
// next tick of each kind on. The origin queues it at time 0.
// Deterministic for a given rng.
func Disseminate(p Params, n int, rng *rand.Rand) (at []time.Duration, sent int) {
	at = make([]time.Duration, n)
	for i := range at {
		at[i] = -1
	}
	if n == 0 {
		return at, 0
	}
	type stream struct {
		period time.Duration
		fanout int
	}
	streams := []stream{{p.GossipInterval, p.GossipNodes}}
	if p.Piggyback {
		streams = append(streams, stream{p.ProbeInterval, 1}, stream{p.ProbeInterval, 1})
	}
	phase := make([][]time.Duration, len(streams))
	for s, st := range streams {
		phase[s] = make([]time.Duration, n)
		for i := range phase[s] {
			phase[s][i] = time.Duration(rng.Int64N(int64(st.period)))
		}
	}
	limit := RetransmitLimit(p.RetransmitMult, n)
	left := make([]int, n)
	// nextTick is member i's first tick of stream s strictly after t.
	nextTick := func(s, i int, t time.Duration) time.Duration {
		ph, g := phase[s][i], streams[s].period
		if t < ph {
			return ph
		}
		return ph + ((t-ph)/g+1)*g
	}
	var q tickQueue
	infect := func(i int, t time.Duration) {
		at[i], left[i] = t, limit
		for s := range streams {
			heap.Push(&q, tick{nextTick(s, i, t), i, s})
		}
	}
	infect(0, 0)
	picked := make([]int, 0, p.GossipNodes)
	for q.Len() > 0 {
		t := heap.Pop(&q).(tick)
		i := t.member
		if left[i] == 0 {
			continue
		}
		picked = picked[:0]
		for len(picked) < min(streams[t.stream].fanout, n-1) && left[i] > 0 {
			j := rng.IntN(n - 1)
			if j >= i {
				j++
			}
			if slices.Contains(picked, j) {
				continue
			}
			picked = append(picked, j)
			left[i]--
			sent++
			if at[j] < 0 {
				infect(j, t.at+p.Latency)
			}
		}
		if left[i] > 0 {
			heap.Push(&q, tick{t.at + streams[t.stream].period, i, t.stream})
		}
	}
	return at, sent
}

// SpreadOf summarises Disseminate's arrival times.
func SpreadOf(at []time.Duration, sent int) Spread {
	var got []time.Duration
	for _, t := range at[1:] {
		if t >= 0 {
			got = append(got, t)
		}
	}
	s := Spread{Sent: sent}
	if others := len(at) - 1; others > 0 {
		s.Missed = float64(others-len(got)) / float64(others)
	}
	if len(got) == 0 {
		return s
	}
	slices.Sort(got)
	s.First, s.P50, s.P99, s.Max = got[0], quantile(got, 0.5), quantile(got, 0.99), got[len(got)-1]
	return s
}

// quantile is the q-quantile of sorted values (the nearest rank).
// medianBy is the median (the upper one of an even count) of f over rs,
// which must not be empty.
func medianBy[T any](rs []T, f func(T) time.Duration) time.Duration {
	v := make([]time.Duration, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Detection is the predicted timeline of a member's failure (it stops
// answering without leaving) at time 0, as the medians over the runs.
type Detection struct {
	// FirstProbe is when some member first probes it; FirstSuspect when
	// that probe fails and the member suspects it (a whole probe
	// interval after the probe started: memberlist waits for the indirect
	// acks and the TCP fallback until then).
	FirstProbe, FirstSuspect time.Duration
	// Confirmations is how many of the k confirmations (other members'
	// own failed probes, gossiped) the first suspector had when its
	// timer ran out, and FirstDead is when it declares the member dead.
	Confirmations int
	FirstDead     time.Duration
	// P50, P99 and Max are when the other live members see it dead
	// (memberlist's NotifyLeave): the first suspector's dead message or
	// their own suspicion timer, whichever is first.
	P50, P99, Max time.Duration
}

// Detect simulates runs failures in a cluster of n members and returns
// the median of each figure.
//
// Per run: each of the n−1 live members probes the members round-robin
// over a shuffled list, one per ProbeInterval, so its next probe of the
// failed member is uniform over (n−1) intervals; the earliest three are
// the first suspector and its confirmations. Each suspicion spreads as a
// broadcast (Disseminate); the first suspector's timer starts at max and
// drops as confirmations arrive (SuspicionTimeoutAfter), and when it runs
// out its dead message spreads as another broadcast. Every other member
// starts its own timer when the first suspicion reaches it, with the same
// confirmations, so it sees the member dead at the earlier of the dead
// message's arrival and its own timer (approximated as its receipt of the
// first suspicion plus the first suspector's timeout).
func Detect(p Params, n, runs int, seed uint64) Detection {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	minT, maxT, k := SuspicionBounds(p, n)
	live := n - 1 // the members left; index 0 is the first suspector
	var rs []Detection
	for range runs {
		var d Detection
		// Each live member's next probe of the failed one.
		cycle := time.Duration(live) * p.ProbeInterval
		probes := make([]time.Duration, live)
		for i := range probes {
			probes[i] = time.Duration(rng.Int64N(int64(cycle)))
		}
		slices.Sort(probes)
		d.FirstProbe = probes[0]
		d.FirstSuspect = probes[0] + p.ProbeInterval
		// Confirmations reach the first suspector after their own
		// dissemination delay to a random member.
		timeout := maxT
		if k < 1 {
			timeout = minT
		}
		for c := 1; c <= k && c < live; c++ {
			at, _ := Disseminate(p, live, rng)
			arrive := probes[c] + p.ProbeInterval + at[1+rng.IntN(live-1)]
			if arrive-d.FirstSuspect >= timeout {
				break
			}
			d.Confirmations = c
			timeout = SuspicionTimeoutAfter(c, k, minT, maxT)
		}
		d.FirstDead = d.FirstSuspect + timeout
		suspect, _ := Disseminate(p, live, rng)
		dead, _ := Disseminate(p, live, rng)
		seen := make([]time.Duration, 0, live-1)
		for i := 1; i < live; i++ {
			t := time.Duration(math.MaxInt64)
			if dead[i] >= 0 {
				t = d.FirstDead + dead[i]
			}
			if suspect[i] >= 0 {
				t = min(t, d.FirstSuspect+suspect[i]+timeout)
			}
			seen = append(seen, t)
		}
		slices.Sort(seen)
		if len(seen) > 0 {
			d.P50, d.P99, d.Max = quantile(seen, 0.5), quantile(seen, 0.99), seen[len(seen)-1]
		}
		rs = append(rs, d)
	}
	med := func(f func(Detection) time.Duration) time.Duration { return medianBy(rs, f) }
	conf := make([]int, len(rs))
	for i, r := range rs {
		conf[i] = r.Confirmations
	}
	slices.Sort(conf)
	return Detection{
		FirstProbe:    med(func(d Detection) time.Duration { return d.FirstProbe }),
		FirstSuspect:  med(func(d Detection) time.Duration { return d.FirstSuspect }),
		Confirmations: conf[len(conf)/2],
		FirstDead:     med(func(d Detection) time.Duration { return d.FirstDead }),
		P50:           med(func(d Detection) time.Duration { return d.P50 }),
		P99:           med(func(d Detection) time.Duration { return d.P99 }),
		Max:           med(func(d Detection) time.Duration { return d.Max }),
	}
}

// Converge simulates runs broadcasts in a cluster of n members (one
// member's meta change) and returns the median of each figure over the
// runs, and the mean fraction missed.
func Converge(p Params, n, runs int, seed uint64) Spread {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var rs []Spread
	var missed float64
	for range runs {
		s := SpreadOf(Disseminate(p, n, rng))
		rs = append(rs, s)
		missed += s.Missed
	}
	med := func(f func(Spread) time.Duration) time.Duration { return medianBy(rs, f) }
	return Spread{
		First:  med(func(s Spread) time.Duration { return s.First }),
		P50:    med(func(s Spread) time.Duration { return s.P50 }),
		P99:    med(func(s Spread) time.Duration { return s.P99 }),
		Max:    med(func(s Spread) time.Duration { return s.Max }),
		Missed: missed / float64(runs),
		Sent:   rs[len(rs)/2].Sent,
	}
}

// MissedFraction is the fraction of members a broadcast is expected never
// to reach when it has reached a fraction x of them: every member that has
// it sends it RetransmitLimit times to random members, so a given member
// is missed by all x·n·L sends with probability exp(−x·L·n/(n−1)); x is
// the solution of x = 1 − exp(−x·L·n/(n−1)) (the final size of such an
// epidemic), and the result is 1 − x.
func MissedFraction(p Params, n int) float64 {
	l := float64(RetransmitLimit(p.RetransmitMult, n)) * float64(n) / float64(n-1)
	x := 1.0
	for range 200 {
		x = 1 - math.Exp(-l*x)
	}
	return 1 - x
}

// tick is a member's gossip tick in the simulation's event queue.
type tick struct {
	at     time.Duration
	member int
	stream int // gossip, ping or ack
}

type tickQueue []tick

func (q tickQueue) Len() int { return len(q) }
func (q tickQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	if q[i].member != q[j].member {
		return q[i].member < q[j].member
	}
	return q[i].stream < q[j].stream
}
func (q tickQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *tickQueue) Push(x any)   { *q = append(*q, x.(tick)) }
func (q *tickQueue) Pop() any {
	old := *q
	t := old[len(old)-1]
	*q = old[:len(old)-1]
	return t
}
