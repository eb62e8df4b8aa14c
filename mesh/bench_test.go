package mesh

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/internal/testutil/benchenv"
	"github.com/gracewatch/gracewatch/proto/gwpb"
	metrics "github.com/hashicorp/go-metrics"
	"github.com/hashicorp/memberlist"
)

// BenchmarkDeadDetection measures how long a member takes to see another,
// stopped without leaving, as dead: two members, per profile. Each
// iteration takes seconds; run with e.g. -benchtime 3x.
func BenchmarkDeadDetection(b *testing.B) {
	for _, profile := range []string{"local", "lan"} {
		b.Run(profile, func(b *testing.B) {
			var total time.Duration
			for range b.N {
				b.StopTimer()
				set := func(o *Options) { o.Profile = profile }
				a := start(b, "a", gwpb.Role_ROLE_AGGREGATOR, set)
				x := start(b, "x", gwpb.Role_ROLE_AGENT, func(o *Options) { set(o); o.Config.Join = []string{a.Addr()} })
				waitFor(b, 10*time.Second, "a sees x", func() bool { return sees(a.Mesh, "x") })
				b.StartTimer()
				x.Shutdown()
				total += waitFor(b, 60*time.Second, "a sees x dead", func() bool { return statusOf(a.Mesh, "x") == StatusDead })
				b.StopTimer()
				a.Shutdown()
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "s/detect")
		})
	}
}

// BenchmarkMetaPropagation measures how long a SetMeta takes to reach
// another member's Members() (three members, "lan" profile).
func BenchmarkMetaPropagation(b *testing.B) {
	lan := func(o *Options) { o.Profile = "lan" }
	a := start(b, "a", gwpb.Role_ROLE_AGGREGATOR, lan)
	x := start(b, "x", gwpb.Role_ROLE_AGENT, func(o *Options) { lan(o); o.Config.Join = []string{a.Addr()} })
	start(b, "y", gwpb.Role_ROLE_AGENT, func(o *Options) { lan(o); o.Config.Join = []string{a.Addr()} })
	waitFor(b, 10*time.Second, "a sees all", func() bool { return sees(a.Mesh, "x", "y") })
	b.ResetTimer()
	for i := range b.N {
		seq := uint64(i + 1)
		go x.SetMeta(&gwpb.Meta{Seq: seq})
		waitFor(b, 10*time.Second, "a sees the meta", func() bool {
			m, _ := member(a.Mesh, "x")
			return m.Meta.GetSeq() == seq
		})
	}
}

// BenchmarkGossipBytes compares the bytes memberlist sends per member and
// second in a steady, healthy cluster of members built with New (each with
// an agent's healthy meta) against bare memberlist members (DefaultLANConfig,
// no delegate, no label, no encryption), in one run, one variant after the
// other, at the same sizes and addresses (see swarmAddr; one port per
// variant). The mesh variant is insecure (no keyring) so that only the
// delegate, the meta and the label differ.
//
// Bytes are counted by a go-metrics sink installed as the global one:
// memberlist's own memberlist.udp.sent and memberlist.tcp.sent counters,
// i.e. the payloads it hands to its transport after compression and
// encryption, before the label header (added here from the packet and
// connection counts) and without IP/UDP/TCP headers.
//
// Per variant: start the members (startSwarm), wait until the join gossip
// has died down (the UDP rate is back to the probes' two packets per member
// per second), count a window (GW_BENCH_WINDOW, default 30s), then make K
// push-pulls (GW_BENCH_EXCHANGES, default 40) between random members to
// measure the bytes of one. Push-pulls are rare (one per member per 30 s
// scaled by log2(n/32)+1: 3 min at 1,000) and memberlist starts each
// member's first one only after a random stagger plus a whole period, so a
// window of a minute sees few or none; the "steady" figure adds them at
// their steady rate: UDP bytes in the window plus one push-pull's bytes per
// member per period. Sizes come from GW_BENCH_GOSSIP_SIZES (default 1000).
// Run with -benchtime 1x.
func BenchmarkGossipBytes(b *testing.B) {
	sizes := benchenv.Ints(b, "GW_BENCH_GOSSIP_SIZES", []int{1000})
	defer debug.SetGCPercent(debug.SetGCPercent(benchenv.NonNegInt(b, "GW_BENCH_GOGC", 400)))
	sink := installByteCounter(b)
	for _, n := range sizes {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			for range b.N {
				bare := gossipTraffic(b, sink, n, false)
				withMeta := gossipTraffic(b, sink, n, true)
				labelled := withMeta.withLabel(DefaultLabel)
				for _, t := range []struct {
					name string
					tr   traffic
				}{{"bare", bare}, {"mesh", withMeta}, {"mesh+label", labelled}} {
					progress(b, "%-10s %s", t.name, t.tr)
				}
				b.ReportMetric(bare.steady(), "B/node/s-bare")
				b.ReportMetric(labelled.steady(), "B/node/s-mesh")
				b.ReportMetric(labelled.steady()/bare.steady(), "ratio")
				b.ReportMetric(withMeta.steady()/bare.steady(), "ratio-nolabel")
				b.ReportMetric(labelled.perExchange/bare.perExchange, "ratio-pushpull")
				b.ReportMetric(labelled.windowRate()/bare.windowRate(), "ratio-window")
				b.ReportMetric(withMeta.metaBytes, "meta-bytes")
				b.ReportMetric(bare.cores, "cores-bare")
				b.ReportMetric(withMeta.cores, "cores-mesh")
			}
		})
	}
}

// traffic is what the members sent during the window, and one push-pull's
// bytes.
type traffic struct {
	n                    int
	span                 time.Duration
	udpBytes, udpPackets int64
	tcpBytes, connects   int64 // connects: push-pulls started
	suspects, deads      int64 // suspect and dead messages handled
	perExchange          float64
	exchanges            int64
	cores                float64
	metaBytes            float64       // mean encoded meta
	settled              time.Duration // from convergence to the probe rate
	minSeen              int           // the fewest members any member counted at the end
	period               time.Duration // push-pull period at n
}

// withLabel adds memberlist's label header (type, length, label) to every
// packet and to every push-pull connection.
func (t traffic) withLabel(label string) traffic {
	h := int64(2 + len(label))
	t.udpBytes += t.udpPackets * h
	t.tcpBytes += t.connects * h
	t.perExchange += float64(h)
	return t
}

// windowRate is the bytes per member per second measured in the window.
func (t traffic) windowRate() float64 {
	return float64(t.udpBytes+t.tcpBytes) / float64(t.n) / t.span.Seconds()
}

// steady is the window's UDP rate plus one push-pull per member per period.
func (t traffic) steady() float64 {
	return float64(t.udpBytes)/float64(t.n)/t.span.Seconds() + t.perExchange/t.period.Seconds()
}

func (t traffic) String() string {
	w := t.span.Seconds() * float64(t.n)
	return fmt.Sprintf("%d members: steady %.0f B/node/s = UDP %.0f B/node/s (%.2f packets/node/s) + push-pulls %.0f B/node/s "+
		"(%.0f B each, both ways, median of %d; one per member per %v); window of %v: %.0f B/node/s with %d push-pulls; "+
		"%.2f cores; suspect msgs %d, dead msgs %d; meta %.1f B; join gossip settled in %v; fewest members seen at the end %d",
		t.n, t.steady(), float64(t.udpBytes)/w, float64(t.udpPackets)/w, t.perExchange/t.period.Seconds(),
		t.perExchange, t.exchanges, t.period, t.span, t.windowRate(), t.connects,
		t.cores, t.suspects, t.deads, t.metaBytes, t.settled.Round(time.Second), t.minSeen)
}

// gossipTraffic starts n members (mesh or bare), waits for convergence and
// quiet, counts one window and measures push-pulls. Every member is shut
// down before it returns.
func gossipTraffic(b *testing.B, sink *byteCounter, n int, withMesh bool) traffic {
	b.Helper()
	window := benchenv.Duration(b, "GW_BENCH_WINDOW", 30*time.Second)
	settleMax := benchenv.Duration(b, "GW_BENCH_SETTLE", 3*time.Minute)
	k := benchenv.NonNegInt(b, "GW_BENCH_EXCHANGES", 40)
	port := benchenv.NonNegInt(b, "GW_BENCH_PORT", 17946)
	if withMesh {
		port++
	}
	tr := traffic{n: n, span: window, period: pushPullPeriod(n)}
	// An up agent's gossiped meta (agent/meshlink gossipedMeta's layout: schema,
	// role, incarnation, seq, state). Its values differ from node to node,
	// as in a real cluster, where compression of push-pulls finds less to
	// share: agent boots (incarnation) and state changes (seq).
	metas := make([]*gwpb.Meta, n)
	var metaBytes int
	for i := range metas {
		metas[i] = &gwpb.Meta{Incarnation: 1 + rand.Uint64N(20), Seq: 1 + rand.Uint64N(5000), State: gwpb.State_STATE_UP}
		enc, err := EncodeMeta(initialMeta(metas[i], gwpb.Role_ROLE_AGENT))
		if err != nil {
			b.Fatal(err)
		}
		metaBytes += len(enc)
	}
	if withMesh {
		tr.metaBytes = float64(metaBytes) / float64(n)
	}
	create := func(i int, addr, seed string) (benchMember, error) {
		name := fmt.Sprintf("node%04d", i)
		if withMesh {
			cfg := DefaultConfig()
			cfg.Bind, cfg.Insecure = addr, true
			if seed != "" {
				cfg.Join = []string{seed}
			}
			m, err := New(Options{Name: name, Role: gwpb.Role_ROLE_AGENT, Config: cfg, Meta: metas[i], Profile: "lan"})
			if err != nil {
				return nil, err
			}
			return m, nil
		}
		c := memberlist.DefaultLANConfig()
		c.Name = name
		c.BindAddr, c.BindPort = splitIPPort(addr)
		c.AdvertiseAddr, c.AdvertisePort = c.BindAddr, c.BindPort
		c.LogOutput = io.Discard
		ml, err := memberlist.Create(c)
		if err != nil {
			return nil, err
		}
		if seed != "" {
			// Retried like mesh's rejoin loop would, sooner.
			var err error
			for try := 0; try < 3; try++ {
				if _, err = ml.Join([]string{seed}); err == nil {
					break
				}
			}
			if err != nil {
				ml.Shutdown()
				return nil, err
			}
		}
		return ml, nil
	}
	members := startSwarm(b, n, port, create)
	defer shutdownAll(members)

	tr.settled = settleGossip(b, sink, n, settleMax)
	progress(b, "join gossip settled after %v; counting %v (load average %s)", tr.settled.Round(time.Second), window, benchenv.LoadAvg())
	before, cpu0 := sink.snapshot(), benchenv.CPUTime()
	time.Sleep(window) // not a wait: the measurement window
	after, cpu1 := sink.snapshot(), benchenv.CPUTime()
	d := after.minus(before)
	tr.udpBytes, tr.udpPackets, tr.tcpBytes = d.udpBytes, d.udpPackets, d.tcpBytes
	tr.connects, tr.suspects, tr.deads = d.connects, d.suspects, d.deads
	tr.cores = (cpu1 - cpu0).Seconds() / window.Seconds()
	progress(b, "window done (load average %s)", benchenv.LoadAvg())
	tr.minSeen = n
	for _, m := range members {
		tr.minSeen = min(tr.minSeen, m.NumMembers())
	}
	if tr.minSeen < n-n/100 {
		b.Errorf("a member counted %d live members of %d at the end of the window: the cluster was not stable", tr.minSeen, n)
	}

	// A join with a member already known is one push-pull, the same
	// exchange as memberlist's periodic one. The median resists a
	// periodic push-pull that overlaps one.
	var sizes []int64
	for range k {
		before := sink.snapshot()
		i, j := rand.IntN(n), rand.IntN(n-1)
		if j >= i {
			j++
		}
		if _, err := memberlistOf(members[i]).Join([]string{swarmAddr(j, port)}); err != nil {
			b.Fatalf("push-pull from member %d to %d: %v", i, j, err)
		}
		if d := sink.snapshot().minus(before); d.connects == 1 {
			sizes = append(sizes, d.tcpBytes)
		}
	}
	if len(sizes) == 0 {
		b.Fatalf("no push-pull measured (a periodic one ran during each of %d joins?)", k)
	}
	slices.Sort(sizes)
	tr.perExchange, tr.exchanges = float64(sizes[len(sizes)/2]), int64(len(sizes))
	return tr
}

// settleGossip waits until the members send only probes (ping and ack:
// two packets per member per second, within 2 %) over 5 s, so that the
// broadcasts of the joins, which every member retransmits, do not count
// as steady traffic. It gives up after limit, logging it. It returns how
// long it waited.
func settleGossip(b *testing.B, sink *byteCounter, n int, limit time.Duration) time.Duration {
	const slice = 5 * time.Second
	begin := time.Now()
	for time.Since(begin) < limit {
		before := sink.snapshot()
		time.Sleep(slice) // not a wait: the slice over which the packet rate is measured
		d := sink.snapshot().minus(before)
		if rate := float64(d.udpPackets) / float64(n) / slice.Seconds(); rate <= 2.04 {
			return time.Since(begin)
		}
	}
	progress(b, "the join gossip has not died down within %v (GW_BENCH_SETTLE): counting anyway", limit)
	return time.Since(begin)
}

// memberlistOf returns the memberlist under a swarm member.
func memberlistOf(m benchMember) *memberlist.Memberlist {
	if x, ok := m.(*Mesh); ok {
		return x.ml
	}
	return m.(*memberlist.Memberlist)
}

// benchMember is what the swarm helpers need of a member: *Mesh and a bare
// *memberlist.Memberlist both have it.
type benchMember interface {
	NumMembers() int
	Shutdown() error
}

// swarmAddr is member i's address: 250 members per 127.0.x.0/24, from
// 127.0.10.1 on, all on one port (Linux routes all of 127/8 to lo).
func swarmAddr(i, port int) string {
	return fmt.Sprintf("127.0.%d.%d:%d", 10+i/250, 1+i%250, port)
}

// startSwarm starts n members with create: member 0 alone, the others in
// parallel batches of GW_BENCH_JOIN_BATCH (default 20), each member after a
// random delay within its batch's time and joining a random member started
// before its batch, so that no seed is a bottleneck.
//
// Joins are paced: a batch of k members joining a cluster of m gets
// k·max(m,100)/L seconds, L being GW_BENCH_JOIN_LOAD (default 1500 joins·members/s): 1,000
// members start in about five and a half minutes, using one to one and a
// half cores. Each join costs every member gossip: the newcomer re-broadcasts
// every member it learned from its seed and every member re-broadcasts the
// newcomer, 4·⌈log10(n+1)⌉ times each, so the cost of a join grows with n.
// Paced at 3000, 4000 or not at all, the process (on 2 cores shared with
// other work) collapsed at about 660, 530 and 460 members: push-pulls time
// out and joins fail (the stall docs/DESIGN.md §4 describes).
//
// It then waits until every member counts n live members. Members that
// missed an alive message during the joins learn it only from a push-pull
// (every 3 min at 1,000), so after GW_BENCH_CONVERGE (default 4m) from the
// last start it proceeds if the median member counts n and none fewer than
// 99 %, logging it, and fails otherwise. The members are shut down at
// cleanup if the caller has not done so.
func startSwarm(b *testing.B, n, port int, create func(i int, addr, seed string) (benchMember, error)) []benchMember {
	b.Helper()
	batch := max(1, benchenv.NonNegInt(b, "GW_BENCH_JOIN_BATCH", 20))
	load := max(1, benchenv.NonNegInt(b, "GW_BENCH_JOIN_LOAD", 1500))
	converge := benchenv.Duration(b, "GW_BENCH_CONVERGE", 4*time.Minute)
	members := make([]benchMember, n)
	b.Cleanup(func() { shutdownAll(members) })
	begin := time.Now()
	m, err := create(0, swarmAddr(0, port), "")
	if err != nil {
		b.Fatalf("member 0 at %s: %v", swarmAddr(0, port), err)
	}
	members[0] = m
	benchenv.StartPaced(b, 1, n, batch, load, func(i, lo int) error {
		seed := swarmAddr(rand.IntN(lo), port)
		m, err := create(i, swarmAddr(i, port), seed)
		if err != nil {
			return fmt.Errorf("member %d at %s (seed %s): %w", i, swarmAddr(i, port), seed, err)
		}
		members[i] = m
		return nil
	})
	started := time.Now()
	seen := make([]int, n)
	var counted time.Time
	if !testutil.Poll(converge, func() bool {
		// Counted at most every 500 ms: with thousands of members a count
		// takes each one's lock, which would slow the joins it waits for.
		if !counted.IsZero() && time.Since(counted) < 500*time.Millisecond && time.Since(started) < converge {
			return false
		}
		counted = time.Now()
		for i, m := range members {
			seen[i] = m.NumMembers()
		}
		slices.Sort(seen)
		return seen[0] == n
	}) {
		if seen[n/2] != n || seen[0] < n-n/100 {
			b.Fatalf("%d members did not converge within %v (GW_BENCH_CONVERGE) of the last start: members counted min %d, median %d, max %d",
				n, converge, seen[0], seen[n/2], seen[n-1])
		}
		progress(b, "not every member counts all %d after %v (GW_BENCH_CONVERGE): fewest %d; %d members short; going on",
			n, converge, seen[0], slices.Index(seen, n))
	}
	progress(b, "%d members started in %v, converged %v later", n, started.Sub(begin).Round(time.Millisecond),
		time.Since(started).Round(time.Millisecond))
	return members
}

// progress logs a step (at once with -v: these benchmarks run for
// minutes).
func progress(b *testing.B, format string, args ...any) {
	b.Helper()
	b.Logf(format, args...)
}

// shutdownAll shuts the members down, 32 at a time; it may be called again.
func shutdownAll(members []benchMember) {
	benchenv.Each(len(members), 32, func(i int) {
		if m := members[i]; m != nil {
			members[i] = nil
			m.Shutdown()
		}
	})
}

// pushPullPeriod is memberlist's push-pull interval at n members:
// DefaultLANConfig's 30 s scaled as memberlist's pushPullScale does.
func pushPullPeriod(n int) time.Duration {
	const interval, threshold = 30 * time.Second, 32
	if n <= threshold {
		return interval
	}
	mult := math.Ceil(math.Log2(float64(n))-math.Log2(threshold)) + 1
	return time.Duration(mult) * interval
}

// byteCounter is a go-metrics sink that keeps memberlist's traffic
// counters. Safe for concurrent use.
type byteCounter struct {
	udpBytes, udpPackets, tcpBytes, tcpSends, connects, suspects, deads atomic.Int64
}

// counts is a snapshot of a byteCounter.
type counts struct {
	udpBytes, udpPackets, tcpBytes, tcpSends, connects, suspects, deads int64
}

func (c counts) minus(o counts) counts {
	return counts{c.udpBytes - o.udpBytes, c.udpPackets - o.udpPackets, c.tcpBytes - o.tcpBytes, c.tcpSends - o.tcpSends,
		c.connects - o.connects, c.suspects - o.suspects, c.deads - o.deads}
}

func (c *byteCounter) snapshot() counts {
	return counts{c.udpBytes.Load(), c.udpPackets.Load(), c.tcpBytes.Load(), c.tcpSends.Load(),
		c.connects.Load(), c.suspects.Load(), c.deads.Load()}
}

var _ metrics.MetricSink = (*byteCounter)(nil)

func (c *byteCounter) IncrCounterWithLabels(key []string, val float32, _ []metrics.Label) {
	if len(key) != 3 || key[0] != "memberlist" {
		return
	}
	switch key[1] + "." + key[2] {
	case "udp.sent":
		c.udpBytes.Add(int64(val))
		c.udpPackets.Add(1)
	case "tcp.sent":
		c.tcpBytes.Add(int64(val))
		c.tcpSends.Add(1)
	case "tcp.connect":
		c.connects.Add(1)
	case "msg.suspect":
		c.suspects.Add(1)
	case "msg.dead":
		c.deads.Add(1)
	}
}

func (c *byteCounter) IncrCounter(key []string, val float32)                { c.IncrCounterWithLabels(key, val, nil) }
func (*byteCounter) SetGauge([]string, float32)                             {}
func (*byteCounter) SetGaugeWithLabels([]string, float32, []metrics.Label)  {}
func (*byteCounter) EmitKey([]string, float32)                              {}
func (*byteCounter) AddSample([]string, float32)                            {}
func (*byteCounter) AddSampleWithLabels([]string, float32, []metrics.Label) {}

// installByteCounter makes a byteCounter go-metrics' global sink (which
// every memberlist in the process reports to) until the benchmark ends.
func installByteCounter(b *testing.B) *byteCounter {
	c := &byteCounter{}
	conf := &metrics.Config{FilterDefault: true, TimerGranularity: time.Millisecond}
	if _, err := metrics.NewGlobal(conf, c); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { metrics.NewGlobal(conf, &metrics.BlackholeSink{}) })
	return c
}
