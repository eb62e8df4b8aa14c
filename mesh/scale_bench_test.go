package mesh

import (
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	_ "net/http/pprof" // GW_BENCH_PPROF
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/testutil/benchenv"
	"github.com/gracewatch/gracewatch/internal/testutil/looptransport"
	metrics "github.com/hashicorp/go-metrics"
	"github.com/hashicorp/memberlist"
)

// BenchmarkScaleTiming measures, in settled clusters of
// GW_BENCH_SCALE_SIZES members (default 1000), how long memberlist takes
// to detect a failed member and to spread a meta change: the two figures
// the model in internal/meshmodel predicts for 10,000 and 20,000 nodes.
//
// The members are bare memberlists with DefaultLANConfig's timing (probe
// every 1 s, probe timeout 500 ms, suspicion multiplier 4 and max
// multiplier 6, gossip to 3 members every 200 ms, retransmit multiplier 4,
// push-pull every 30 s scaled), a delegate whose meta is an 8-byte
// sequence number, and an event delegate that records when each member
// learns of a change. Two things differ from a deployed mesh, both about
// bytes and CPU, not timing: compression is off and there is no
// encryption or label; and each member's transport is looptransport.Transport (real
// UDP and TCP sockets on its own 127.0.x.y address) instead of
// memberlist's NetTransport, which allocates a fresh 64 KiB buffer for
// every packet it receives. Without these, 1,000 members in one process
// on 2 cores collapse during the joins (BENCHMARKS.md).
//
// Per size, after startSwarm and until the join gossip has died down
// (settleGossip), GW_BENCH_REPEATS rounds (default 5) of:
//
//   - convergence: a random member bumps its meta (UpdateNode); the time
//     until each other member's NotifyUpdate sees the new value;
//   - detection: a random member is shut down without leaving; the time
//     until the first suspect message anywhere (memberlist's
//     memberlist.msg.suspect counter, which every suspicion, local or
//     received, increments), the first dead declaration
//     (memberlist.msg.dead) and each other member's NotifyLeave (which
//     memberlist calls for dead members).
//
// Rounds wait GW_BENCH_GAP (default 10s) with no suspect message in
// between. Each observation stops after GW_BENCH_ROUND_LIMIT (default 2m);
// members that have not seen it by then are counted as missing. Run with
// -benchtime 1x. GOGC is GW_BENCH_GOGC (default 400), with a soft memory
// limit of GW_BENCH_MEMLIMIT_MB (default 6144). A cluster that falls into
// overload (late probes, suspicions, more gossip) piles up messages in its
// queues: the process exits when its resident memory passes
// GW_BENCH_MAX_RSS_MB (default 8192), before the machine runs out.
// GW_BENCH_PPROF=127.0.0.1:port serves net/http/pprof during the run.
func BenchmarkScaleTiming(b *testing.B) {
	sizes := benchenv.Ints(b, "GW_BENCH_SCALE_SIZES", []int{1000})
	repeats := max(1, benchenv.NonNegInt(b, "GW_BENCH_REPEATS", 5))
	gap := benchenv.Duration(b, "GW_BENCH_GAP", 10*time.Second)
	limit := benchenv.Duration(b, "GW_BENCH_ROUND_LIMIT", 2*time.Minute)
	settleMax := benchenv.Duration(b, "GW_BENCH_SETTLE", 3*time.Minute)
	port := benchenv.NonNegInt(b, "GW_BENCH_PORT", 17946) + 2
	defer debug.SetGCPercent(debug.SetGCPercent(benchenv.NonNegInt(b, "GW_BENCH_GOGC", 400)))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(int64(benchenv.NonNegInt(b, "GW_BENCH_MEMLIMIT_MB", 6144)) << 20))
	if addr := os.Getenv("GW_BENCH_PPROF"); addr != "" {
		// Profiles of a run in progress, e.g. GW_BENCH_PPROF=127.0.0.1:6060.
		srv := &http.Server{Addr: addr}
		go srv.ListenAndServe()
		defer srv.Close()
	}
	stop := watchRSS(int64(benchenv.NonNegInt(b, "GW_BENCH_MAX_RSS_MB", 8192)) << 20)
	defer stop()
	sink := installTimingSink(b)
	for _, n := range sizes {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			for range b.N {
				rec := &timingRecorder{}
				metas := make([]*seqMeta, n)
				create := func(i int, addr, seed string) (benchMember, error) {
					metas[i] = &seqMeta{}
					return newTimingMember(i, addr, seed, metas[i], rec)
				}
				members := startSwarm(b, n, port, create)
				defer shutdownAll(members)
				settled := settleGossip(b, sink.byteCounter, n, settleMax)
				progress(b, "join gossip settled after %v (load average %s)", settled.Round(time.Second), benchenv.LoadAvg())

				var conv, det []roundStats
				alive := make([]int, n)
				for i := range alive {
					alive[i] = i
				}
				for r := range repeats {
					quiet(b, sink, gap)
					// Convergence.
					x := alive[rand.IntN(len(alive))]
					seq := metas[x].bump()
					name := memberlistOf(members[x]).LocalNode().Name
					cpu0, t0 := benchenv.CPUTime(), time.Now()
					rec.arm(name, x, kindUpdate, seq, n)
					go memberlistOf(members[x]).UpdateNode(limit)
					s := rec.wait(b, len(alive)-1, t0, limit)
					s.cores = (benchenv.CPUTime() - cpu0).Seconds() / time.Since(t0).Seconds()
					conv = append(conv, s)
					progress(b, "round %d: meta of %s: %s (load average %s)", r+1, name, s, benchenv.LoadAvg())

					quiet(b, sink, gap)
					// Detection.
					k := rand.IntN(len(alive))
					v := alive[k]
					alive = slices.Delete(alive, k, k+1)
					name = memberlistOf(members[v]).LocalNode().Name
					before := sink.snapshot()
					cpu0, t0 = benchenv.CPUTime(), time.Now()
					rec.arm(name, v, kindLeave, 0, n)
					sink.arm(t0)
					members[v].Shutdown()
					members[v] = nil
					s = rec.wait(b, len(alive), t0, limit)
					s.cores = (benchenv.CPUTime() - cpu0).Seconds() / time.Since(t0).Seconds()
					s.firstSuspect, s.firstDead = sink.firsts(t0)
					d := sink.snapshot().minus(before)
					s.suspects, s.deads = d.suspects, d.deads
					det = append(det, s)
					progress(b, "round %d: %s shut down: %s (load average %s)", r+1, name, s, benchenv.LoadAvg())
				}
				reportRounds(b, "conv", conv)
				reportRounds(b, "det", det)
				progress(b, "summary at %d members (medians of %d rounds): convergence %s; detection %s",
					n, repeats, medianOf(conv), medianOf(det))
			}
		})
	}
}

// watchRSS exits the process, with a message on stderr, when its resident
// memory passes limit bytes. The returned function stops the watch.
func watchRSS(limit int64) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if rss := residentBytes(); rss > limit {
				fmt.Fprintf(os.Stderr, "resident memory %d MiB passed %d MiB (GW_BENCH_MAX_RSS_MB): the cluster is overloaded; exiting\n",
					rss>>20, limit>>20)
				os.Exit(3)
			}
		}
	}()
	return func() { close(done) }
}

// residentBytes is this process's resident memory (VmRSS), 0 if unknown.
func residentBytes() int64 {
	data, _ := os.ReadFile("/proc/self/status")
	for line := range strings.Lines(string(data)) {
		if kb, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			v, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(kb), " kB"), 10, 64)
			return v << 10
		}
	}
	return 0
}

// quiet waits until no suspect message has been counted for gap (other
// members' false suspicions, or the last round's dead member's, would
// blur the next round), giving up after 10·gap.
func quiet(b *testing.B, sink *timingSink, gap time.Duration) {
	b.Helper()
	begin := time.Now()
	for time.Since(begin) < 10*gap {
		before := sink.snapshot()
		time.Sleep(gap) // not a wait: the quiet gap is measured: no suspect or dead message within it
		if d := sink.snapshot().minus(before); d.suspects == 0 && d.deads == 0 {
			return
		}
	}
	progress(b, "suspect or dead messages still flowing after %v: measuring anyway", 10*gap)
}

// roundStats is one round's observation: when each observer saw the
// change, relative to the change.
type roundStats struct {
	observers, seen         int
	first, p50, p99, last   time.Duration
	firstSuspect, firstDead time.Duration // detection only; -1 if none
	suspects, deads         int64
	cores                   float64
}

func (s roundStats) String() string {
	out := fmt.Sprintf("%d/%d observers; first %v, p50 %v, p99 %v, max %v; %.2f cores",
		s.seen, s.observers, ms(s.first), ms(s.p50), ms(s.p99), ms(s.last), s.cores)
	if s.suspects != 0 || s.deads != 0 {
		out += fmt.Sprintf("; first suspect %v, first dead %v (suspect msgs %d, dead msgs %d)",
			ms(s.firstSuspect), ms(s.firstDead), s.suspects, s.deads)
	}
	return out
}

func ms(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

// medianOf is the per-field median of the rounds.
func medianOf(rs []roundStats) roundStats {
	med := func(f func(roundStats) time.Duration) time.Duration {
		v := make([]time.Duration, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	m := rs[len(rs)/2]
	m.first = med(func(r roundStats) time.Duration { return r.first })
	m.p50 = med(func(r roundStats) time.Duration { return r.p50 })
	m.p99 = med(func(r roundStats) time.Duration { return r.p99 })
	m.last = med(func(r roundStats) time.Duration { return r.last })
	m.firstSuspect = med(func(r roundStats) time.Duration { return r.firstSuspect })
	m.firstDead = med(func(r roundStats) time.Duration { return r.firstDead })
	return m
}

func reportRounds(b *testing.B, prefix string, rs []roundStats) {
	m := medianOf(rs)
	b.ReportMetric(m.p50.Seconds(), prefix+"-p50-s")
	b.ReportMetric(m.p99.Seconds(), prefix+"-p99-s")
	b.ReportMetric(m.last.Seconds(), prefix+"-max-s")
	if prefix == "det" {
		b.ReportMetric(m.firstSuspect.Seconds(), "det-suspect-s")
		b.ReportMetric(m.firstDead.Seconds(), "det-dead-s")
	}
	missing := 0
	for _, r := range rs {
		missing += r.observers - r.seen
	}
	b.ReportMetric(float64(missing), prefix+"-missing")
}

// Kinds of change a timingRecorder waits for.
const (
	kindUpdate = iota // NotifyUpdate with the target's new meta
	kindLeave         // NotifyLeave of the target
)

// timingRecorder collects, for the armed change, the first time each
// member sees it. Its methods are called from memberlist's event
// delegates and must not block.
type timingRecorder struct {
	mu     sync.Mutex
	target string
	self   int // the target's index: its own events do not count
	kind   int
	seq    uint64
	at     []time.Time // by member index; zero until seen
	count  int
	seenCh chan struct{} // signalled on each new sighting
}

func (r *timingRecorder) arm(target string, self, kind int, seq uint64, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.target, r.self, r.kind, r.seq = target, self, kind, seq
	r.at, r.count = make([]time.Time, n), 0
	r.seenCh = make(chan struct{}, 1)
}

func (r *timingRecorder) saw(observer int, kind int, node *memberlist.Node) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at == nil || observer == r.self || node.Name != r.target || kind != r.kind || !r.at[observer].IsZero() {
		return
	}
	if kind == kindUpdate && (len(node.Meta) != 8 || binary.BigEndian.Uint64(node.Meta) != r.seq) {
		return
	}
	r.at[observer] = now
	r.count++
	select {
	case r.seenCh <- struct{}{}:
	default:
	}
}

// wait waits until want members have seen the change or limit has
// passed, then disarms and returns the statistics.
func (r *timingRecorder) wait(b *testing.B, want int, t0 time.Time, limit time.Duration) roundStats {
	b.Helper()
	deadline := time.After(limit)
	r.mu.Lock()
	ch := r.seenCh
	r.mu.Unlock()
loop:
	for {
		r.mu.Lock()
		c := r.count
		r.mu.Unlock()
		if c >= want {
			break
		}
		select {
		case <-ch:
		case <-deadline:
			break loop
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var d []time.Duration
	for _, at := range r.at {
		if !at.IsZero() {
			d = append(d, at.Sub(t0))
		}
	}
	r.at = nil
	s := roundStats{observers: want, seen: len(d), firstSuspect: -1, firstDead: -1}
	if len(d) == 0 {
		return s
	}
	slices.Sort(d)
	// Quantiles over all observers: one that never saw it counts as
	// later than any that did.
	q := func(p float64) time.Duration {
		i := min(int(p*float64(want)), want-1)
		if i >= len(d) {
			return limit
		}
		return d[i]
	}
	s.first, s.p50, s.p99 = d[0], q(0.5), q(0.99)
	s.last = d[len(d)-1]
	if len(d) < want {
		s.last = limit
	}
	return s
}

// seqMeta is a member's meta: an 8-byte big-endian sequence number.
type seqMeta struct{ seq atomic.Uint64 }

func (m *seqMeta) bump() uint64 { return m.seq.Add(1) }

// timingDelegate is a member's memberlist delegate and event delegate.
type timingDelegate struct {
	index int
	meta  *seqMeta
	rec   *timingRecorder
}

func (d *timingDelegate) NodeMeta(int) []byte {
	return binary.BigEndian.AppendUint64(nil, d.meta.seq.Load())
}
func (*timingDelegate) NotifyMsg([]byte)                {}
func (*timingDelegate) GetBroadcasts(int, int) [][]byte { return nil }
func (*timingDelegate) LocalState(bool) []byte          { return nil }
func (*timingDelegate) MergeRemoteState([]byte, bool)   {}
func (*timingDelegate) NotifyJoin(*memberlist.Node)     {}
func (d *timingDelegate) NotifyLeave(n *memberlist.Node) {
	d.rec.saw(d.index, kindLeave, n)
}
func (d *timingDelegate) NotifyUpdate(n *memberlist.Node) {
	d.rec.saw(d.index, kindUpdate, n)
}

// newTimingMember starts a bare memberlist with DefaultLANConfig's timing
// on a looptransport.Transport at addr, joined to seed unless it is empty.
func newTimingMember(i int, addr, seed string, meta *seqMeta, rec *timingRecorder) (*memberlist.Memberlist, error) {
	c := memberlist.DefaultLANConfig()
	c.Name = fmt.Sprintf("node%05d", i)
	c.BindAddr, c.BindPort = splitIPPort(addr)
	c.AdvertiseAddr, c.AdvertisePort = c.BindAddr, c.BindPort
	c.LogOutput = io.Discard
	c.EnableCompression = false
	d := &timingDelegate{index: i, meta: meta, rec: rec}
	c.Delegate, c.Events = d, d
	t, err := looptransport.New(addr)
	if err != nil {
		return nil, err
	}
	c.Transport = t
	ml, err := memberlist.Create(c)
	if err != nil {
		t.Shutdown()
		return nil, err
	}
	if seed != "" {
		for try := 0; ; try++ {
			if _, err = ml.Join([]string{seed}); err == nil || try == 2 {
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

// timingSink is a byteCounter that also records the first suspect and
// dead messages after it is armed.
type timingSink struct {
	*byteCounter
	armedAt       atomic.Int64 // UnixNano
	suspect, dead atomic.Int64 // UnixNano of the first since armedAt, 0 if none
}

func (s *timingSink) arm(t time.Time) {
	s.suspect.Store(0)
	s.dead.Store(0)
	s.armedAt.Store(t.UnixNano())
}

func (s *timingSink) firsts(t0 time.Time) (suspect, dead time.Duration) {
	f := func(v int64) time.Duration {
		if v == 0 {
			return -1
		}
		return time.Unix(0, v).Sub(t0)
	}
	return f(s.suspect.Load()), f(s.dead.Load())
}

func (s *timingSink) IncrCounterWithLabels(key []string, val float32, labels []metrics.Label) {
	s.byteCounter.IncrCounterWithLabels(key, val, labels)
	if len(key) != 3 || key[0] != "memberlist" || key[1] != "msg" || s.armedAt.Load() == 0 {
		return
	}
	now := time.Now().UnixNano()
	switch key[2] {
	case "suspect":
		s.suspect.CompareAndSwap(0, now)
	case "dead":
		s.dead.CompareAndSwap(0, now)
	}
}

func (s *timingSink) IncrCounter(key []string, val float32) { s.IncrCounterWithLabels(key, val, nil) }

// installTimingSink makes a timingSink go-metrics' global sink until the
// benchmark ends.
func installTimingSink(b *testing.B) *timingSink {
	s := &timingSink{byteCounter: &byteCounter{}}
	conf := &metrics.Config{FilterDefault: true, TimerGranularity: time.Millisecond}
	if _, err := metrics.NewGlobal(conf, s); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { metrics.NewGlobal(conf, &metrics.BlackholeSink{}) })
	return s
}
