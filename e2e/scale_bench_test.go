package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	_ "net/http/pprof" // GW_BENCH_PPROF
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/internal/testutil/benchenv"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// BenchmarkDownLatency measures how long after a teardown deadline D a
// scheduler watching GET /v1/watch sees the node go down, with a real
// aggregator process and GW_BENCH_LATENCY_SIZES (default 100,1000) simulated
// agents: memberlist members in this process, built with mesh.New (role
// agent, profile "lan", encrypted with a key file made by `aggregator
// keygen`, as deployed), joined to the aggregator as their seed in parallel,
// paced batches (see startSwarm).
//
// Each simulated agent publishes what a real one does (agent/meshlink):
// a Meta of MetaOf's layout through SetMeta and a StateUpdate (meta, reason,
// teardowns) to every aggregator through SendToRole, on every change. Per
// mode, GW_BENCH_DOWNS agents (default 20), one every GW_BENCH_SPACING
// (default 1s), enter teardown with a deadline D GW_BENCH_LEAD ahead
// (default 3s) and at D, on their own timer, latch down with the agent's
// reason, as an agent does at D. A /v1/watch client records when the first
// "down" event of each node arrives; the latency is that instant minus D
// (one clock: every process is on this machine). The modes
// (GW_BENCH_MODES, default all three):
//
//   - agent: as meshlink.Link does since the direct send stopped waiting behind
//     the gossiped meta: SendToRole at once, SetMeta on a goroutine of its
//     own.
//   - gossip: SetMeta only (the direct send lost): what the fallback gives.
//   - metafirst: SetMeta, then SendToRole, one after the other, as the agent
//     published before that change. SetMeta blocks until memberlist has
//     retransmitted the meta's broadcast its full count (4·⌈log10(n+1)⌉
//     times, three per 200 ms gossip round), so the direct send leaves that
//     much later.
//
// The aggregator runs with its defaults (GOGC 100, clock_skew_allowance
// 5s, so its own enforcement of D, which has a different reason and is
// counted apart, cannot hide a late agent report under 5 s). This process
// runs with GOGC GW_BENCH_GOGC (default 400), as docs/DESIGN.md §4 advises for many
// memberlists in one process.
//
// All the members' gossip lands on this one process: each meta change is
// re-broadcast by every member, as a join is. On 2 cores, 100 members are
// comfortable; 400 are at the edge (a burst of changes can tip the process
// into an overload of late probes, suspicion and refutations that does not
// end by itself); 600 and more do not fit. The benchmark fails if the
// members do not calm down (under 1.5 cores over 10 s) within GW_BENCH_CALM
// (default 2m) after they are ready, and flags a mode during which
// this process used more than 1.5 cores as OVERLOADED. Run with
// -benchtime 1x; a run at 100 and 400 members takes about 6 minutes.
//
// With GW_BENCH_LIGHT=1 the simulated agents send uncompressed gossip and
// use looptransport.Transport (real sockets, one reused receive buffer) instead of
// memberlist's NetTransport, through mesh.Options.Tune: the bytes and CPU
// change, not memberlist's timing nor the encryption, and 1,000 members
// fit (BENCHMARKS.md). The aggregator is unchanged.
func BenchmarkDownLatency(b *testing.B) {
	sizes := benchenv.Ints(b, "GW_BENCH_LATENCY_SIZES", []int{100, 1000})
	modes := []string{"agent"}
	if os.Getenv("GW_BENCH_UNSIGNED") == "1" {
		modes = []string{"agent", "gossip", "metafirst"}
	}
	if v := os.Getenv("GW_BENCH_MODES"); v != "" {
		modes = strings.Split(v, ",")
		for _, m := range modes {
			if !slices.Contains([]string{"agent", "gossip", "metafirst"}, m) {
				b.Fatalf("GW_BENCH_MODES=%q: want agent, gossip and/or metafirst", v)
			}
		}
	}
	defer benchGC(b)()
	if addr := os.Getenv("GW_BENCH_PPROF"); addr != "" {
		// Profiles of this process while it runs (go tool pprof
		// http://ADDR/debug/pprof/heap): what the members cost.
		l, err := net.Listen("tcp", addr)
		if err != nil {
			b.Fatalf("GW_BENCH_PPROF=%s: %v", addr, err)
		}
		srv := &http.Server{Handler: http.DefaultServeMux, ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(l)
		defer srv.Close()
		progress(b, "profiles at http://%s/debug/pprof/", l.Addr())
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			for range b.N {
				downLatency(b, n, modes)
			}
		})
	}
}

// benchGC sets this process's collector for many memberlists in one
// process: GOGC GW_BENCH_GOGC (default 400: less collector CPU on 2 cores)
// under a soft memory limit of GW_BENCH_MEMLIMIT_MIB (default 6,144). GOGC
// 400 alone lets the heap grow to five times what is live: with 1,000
// members' tables live that was 19 GB, most of this machine; the limit
// makes the collector work harder instead. It returns the function that
// restores both.
func benchGC(b *testing.B) func() {
	gc := debug.SetGCPercent(benchenv.NonNegInt(b, "GW_BENCH_GOGC", 400))
	limit := debug.SetMemoryLimit(int64(benchenv.NonNegInt(b, "GW_BENCH_MEMLIMIT_MIB", 6144)) << 20)
	return func() {
		debug.SetGCPercent(gc)
		debug.SetMemoryLimit(limit)
	}
}

// simAgent is a simulated node agent: a mesh member that publishes as
// agent/meshlink does.
type simAgent struct {
	name    string
	m       *mesh.Mesh
	seq     uint64
	metas   sync.WaitGroup // SetMeta calls in flight (mode agent)
	started time.Time
}

// meta is meshlink.MetaOf's layout for a node in state with one job whose
// deadline is d (zero: none).
func (a *simAgent) meta(state gwpb.State, since time.Time, reason string, d time.Time) *gwpb.Meta {
	a.seq++
	m := &gwpb.Meta{Schema: gwpb.SchemaVersion, Role: gwpb.Role_ROLE_AGENT, Incarnation: 1, Seq: a.seq,
		State: state, SinceMs: since.UnixMilli(), Reason: reason}
	if !d.IsZero() {
		m.DeadlineMs = d.UnixMilli()
	}
	if state == gwpb.State_STATE_TEARDOWN {
		m.FreeAtMs = d.UnixMilli()
	}
	return m
}

// announce sends the agent's first state to the aggregators, retrying
// (bounded) until one is seen alive, as meshlink's kick on an aggregator's
// join does.
func (a *simAgent) announce(meta *gwpb.Meta) {
	up := &gwpb.StateUpdate{Meta: meta, StartedMs: a.started.UnixMilli()}
	testutil.Poll(time.Minute, func() bool {
		n, err := a.m.SendToRole(gwpb.Role_ROLE_AGGREGATOR, &gwpb.Envelope{Body: &gwpb.Envelope_State{State: up}})
		return n > 0 && err == nil
	})
}

// publishTimes is how long one publication's two steps took.
type publishTimes struct {
	lag           time.Duration // from D to the start of the down publication
	setMeta, send time.Duration
	setMetaErr    error
	sendErr       error
}

// publish sends a state as mode says (see BenchmarkDownLatency).
func (a *simAgent) publish(mode string, meta *gwpb.Meta, up *gwpb.StateUpdate) publishTimes {
	var pt publishTimes
	setMeta := func() {
		t0 := time.Now()
		pt.setMetaErr = a.m.SetMeta(meta)
		pt.setMeta = time.Since(t0)
	}
	send := func() {
		t0 := time.Now()
		var n int
		n, pt.sendErr = a.m.SendToRole(gwpb.Role_ROLE_AGGREGATOR, &gwpb.Envelope{Body: &gwpb.Envelope_State{State: up}})
		if pt.sendErr == nil && n == 0 {
			pt.sendErr = errors.New("no aggregator alive in the member list")
		}
		pt.send = time.Since(t0)
	}
	switch mode {
	case "agent":
		a.metas.Go(func() { a.m.SetMeta(meta) })
		send()
	case "gossip":
		setMeta()
	case "metafirst":
		setMeta()
		send()
	}
	return pt
}

// downLatency runs one aggregator, n simulated agents and every mode.
func downLatency(b *testing.B, n int, modes []string) {
	downs := benchenv.NonNegInt(b, "GW_BENCH_DOWNS", 20)
	spacing := benchenv.Duration(b, "GW_BENCH_SPACING", time.Second)
	lead := benchenv.Duration(b, "GW_BENCH_LEAD", 3*time.Second)
	settle := benchenv.Duration(b, "GW_BENCH_SETTLE", max(10*time.Second, time.Duration(n)*50*time.Millisecond))
	port := benchenv.NonNegInt(b, "GW_BENCH_PORT", 17960)
	light := benchenv.NonNegInt(b, "GW_BENCH_LIGHT", 0) != 0
	// Node restriction (as deployed): the aggregator takes a node's state
	// from its proven direct updates only, so only mode agent can reach
	// it; GW_BENCH_UNSIGNED=1 runs it with allow_unsigned (and the agents
	// without keys), where gossip counts, for the gossip and metafirst
	// modes.
	unsigned := benchenv.NonNegInt(b, "GW_BENCH_UNSIGNED", 0) != 0
	if !unsigned {
		for _, m := range modes {
			if m != "agent" {
				b.Fatalf("mode %s needs GW_BENCH_UNSIGNED=1: with node restriction gossip carries no state (GW_BENCH_MODES=agent)", m)
			}
		}
	}
	if downs < 1 || downs*len(modes) > n {
		b.Fatalf("GW_BENCH_DOWNS=%d × %d modes does not fit in %d members", downs, len(modes), n)
	}

	bm := newBenchMesh(b, "bench-")
	g := bm.startAggregator(unsigned, fmt.Sprintf(`
[policy]
grace = %q
`, lead.String()))

	agents := bm.startAgents(n, port, g.url, light, unsigned, false)
	// The joins' gossip must die down, and the process must not be stuck
	// in the overload that many memberlists on 2 cores can fall into
	// (late probes, suspicion, refutations, more gossip): then it would
	// measure the overload, not the mesh.
	aggPid := g.cmd.Process.Pid
	calmBy := time.Now().Add(benchenv.Duration(b, "GW_BENCH_CALM", 2*time.Minute))
	time.Sleep(settle) // not a wait: the joins' gossip dies down (GW_BENCH_SETTLE) before the measurement
	var steadyCPU, steadyAgg float64
	for {
		cpu0, agg0, t0 := benchenv.CPUTime(), procCPU(aggPid), time.Now()
		time.Sleep(10 * time.Second) // not a wait: the window the steady CPU is measured over
		steadyCPU = (benchenv.CPUTime() - cpu0).Seconds() / time.Since(t0).Seconds()
		steadyAgg = (procCPU(aggPid) - agg0).Seconds() / time.Since(t0).Seconds()
		if steadyCPU < 1.5 {
			break
		}
		if time.Now().After(calmBy) {
			b.Fatalf("the %d members still use %.2f cores (load average %s) %v after they were ready: overloaded, not measuring",
				n, steadyCPU, benchenv.LoadAvg(), settle+benchenv.Duration(b, "GW_BENCH_CALM", 2*time.Minute))
		}
	}
	progress(b, "steady state over 10 s: this process %.2f cores, the aggregator %.2f cores (load average %s)",
		steadyCPU, steadyAgg, benchenv.LoadAvg())
	b.ReportMetric(steadyCPU, "cores-members")
	b.ReportMetric(steadyAgg, "cores-aggregator")
	// Memory: this process's live heap after a collection (n members'
	// meshes, each holding the n members' table: it grows as n², so per
	// member as n) and its RSS; the aggregator's RSS (its view of n nodes).
	runtime.GC()
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	selfRSS, aggRSS := procRSS(os.Getpid()), procRSS(aggPid)
	progress(b, "memory: this process's live heap %d MiB (%.0f KiB per member), RSS %d MiB (%.0f KiB per member); the aggregator's RSS %d MiB (%.1f KiB per node)",
		mem.HeapAlloc>>20, float64(mem.HeapAlloc)/1024/float64(n), selfRSS>>20, float64(selfRSS)/1024/float64(n),
		aggRSS>>20, float64(aggRSS)/1024/float64(n))
	b.ReportMetric(float64(mem.HeapAlloc)/float64(n), "heap-B/member")
	b.ReportMetric(float64(aggRSS)/float64(n), "agg-rss-B/node")

	w := g.watch(b)
	type arrival struct {
		at     time.Time
		reason string
	}
	var mu sync.Mutex
	want := map[string]bool{}
	got := map[string]arrival{}
	allIn := make(chan struct{}, 1)
	go func() {
		for {
			var ev event
			select {
			case ev = <-w.events:
			case <-w.done:
				return
			}
			if ev.Type != "node" {
				continue
			}
			var nd node
			if json.Unmarshal([]byte(ev.Data), &nd) != nil || nd.State != "down" {
				continue
			}
			mu.Lock()
			if _, seen := got[nd.Name]; want[nd.Name] && !seen {
				got[nd.Name] = arrival{ev.At, nd.Reason}
				if len(got) == len(want) {
					select {
					case allIn <- struct{}{}:
					default:
					}
				}
			}
			mu.Unlock()
		}
	}()

	order := rand.Perm(n)
	for k, mode := range modes {
		picked := order[k*downs : (k+1)*downs]
		mu.Lock()
		clear(want)
		clear(got)
		for _, i := range picked {
			want[agents[i].name] = true
		}
		mu.Unlock()
		deadlines := make([]time.Time, downs)
		times := make([]publishTimes, downs)
		var wg sync.WaitGroup
		begin, cpu0 := time.Now(), benchenv.CPUTime()
		for j, i := range picked {
			a := agents[i]
			wg.Go(func() {
				time.Sleep(time.Until(begin.Add(time.Duration(j) * spacing))) // not a wait: the downs' pacing
				now := time.Now()
				d := now.Add(lead).Truncate(time.Millisecond)
				deadlines[j] = d
				job := "bench-" + strconv.Itoa(j)
				td := &gwpb.Teardown{Job: job, Phase: "teardown", EndedMs: now.UnixMilli(), DeadlineMs: d.UnixMilli(), GraceMs: lead.Milliseconds()}
				meta := a.meta(gwpb.State_STATE_TEARDOWN, now, "", d)
				a.publish(mode, meta, &gwpb.StateUpdate{Meta: meta, Teardowns: []*gwpb.Teardown{td}, StartedMs: a.started.UnixMilli()})
				time.Sleep(time.Until(d)) // not a wait: the simulated agent reports its down at its deadline D
				reason := fmt.Sprintf("job %s teardown exceeded grace %v", job, lead)
				meta = a.meta(gwpb.State_STATE_DOWN, d, reason, d)
				td.Phase = "overdue"
				lag := time.Since(d)
				times[j] = a.publish(mode, meta, &gwpb.StateUpdate{Meta: meta, Reason: reason, Teardowns: []*gwpb.Teardown{td}, StartedMs: a.started.UnixMilli()})
				times[j].lag = lag
			})
		}
		wg.Wait()
		for _, i := range picked {
			agents[i].metas.Wait()
		}
		last := slices.MaxFunc(deadlines, func(x, y time.Time) int { return x.Compare(y) })
		select {
		case <-allIn:
		case <-time.After(time.Until(last.Add(20 * time.Second))):
		}
		cores := (benchenv.CPUTime() - cpu0).Seconds() / time.Since(begin).Seconds()
		mu.Lock()
		var lat []time.Duration
		central := 0
		var missing []string
		for j, i := range picked {
			name := agents[i].name
			arr, ok := got[name]
			if !ok {
				missing = append(missing, name)
				continue
			}
			lat = append(lat, arr.at.Sub(deadlines[j]))
			if strings.HasPrefix(arr.reason, "no report after teardown deadline") {
				central++
			}
		}
		mu.Unlock()
		if len(missing) > 0 {
			b.Fatalf("mode %s: no down event within 20 s of the last deadline for %d of %d nodes: %s",
				mode, len(missing), downs, strings.Join(missing, " "))
		}
		slices.Sort(lat)
		var setMeta, send, lags []time.Duration
		var setMetaErrs, sendErrs int
		for _, pt := range times {
			setMeta, send, lags = append(setMeta, pt.setMeta), append(send, pt.send), append(lags, pt.lag)
			if pt.setMetaErr != nil {
				setMetaErrs++
			}
			if pt.sendErr != nil {
				sendErrs++
			}
		}
		slices.Sort(setMeta)
		slices.Sort(send)
		slices.Sort(lags)
		if mode == "agent" {
			// SetMeta runs on its own goroutine, unmeasured.
			setMeta = []time.Duration{0}
		}
		overload := ""
		if cores > 1.5 {
			overload = " OVERLOADED (these figures measure the overload of this process, not the mesh)"
		}
		progress(b, "%s: this process used %.2f cores%s (load average %s)", mode, cores, overload, benchenv.LoadAvg())
		progress(b, "%s: D to the down event p50 %v, p99 %v, max %v (%d of %d from the aggregator's own enforcement); "+
			"the down publication started p50 %v max %v after D (the teardown's was still running, or the timer was late), "+
			"its SetMeta took p50 %v max %v (%d errors), its SendToRole p50 %v max %v (%d errors); all: %v",
			mode, ms(benchenv.Percentile(lat, 50)), ms(benchenv.Percentile(lat, 99)), ms(lat[len(lat)-1]), central, downs,
			ms(benchenv.Percentile(lags, 50)), ms(lags[len(lags)-1]),
			ms(benchenv.Percentile(setMeta, 50)), ms(setMeta[len(setMeta)-1]), setMetaErrs,
			ms(benchenv.Percentile(send, 50)), ms(send[len(send)-1]), sendErrs, roundAll(lat))
		b.ReportMetric(float64(benchenv.Percentile(lat, 50))/1e6, "p50-ms-"+mode)
		b.ReportMetric(float64(benchenv.Percentile(lat, 99))/1e6, "p99-ms-"+mode)
		b.ReportMetric(float64(lat[len(lat)-1])/1e6, "max-ms-"+mode)
		b.ReportMetric(cores, "cores-"+mode)
		time.Sleep(10 * time.Second) // not a wait: a quiet gap, so that the last broadcasts of one mode do not load the next's measurement
	}
}

// startSwarm starts n members with create, at 127.0.(40+i/250).(1+i%250)
// on one port (Linux routes all of 127/8 to lo): in parallel batches of
// GW_BENCH_JOIN_BATCH (default 20), each member after a random delay within
// its batch's time. A batch of k members joining a cluster of m gets
// k·max(m,100)/L seconds, L being GW_BENCH_JOIN_LOAD (default 800
// joins·members/s), because every join costs every member gossip (see
// mesh's BenchmarkGossipBytes). Then it waits until ready returns nil, and
// fails after GW_BENCH_CONVERGE (default 4m) from the last start. The
// members are shut down at cleanup.
func startSwarm(b *testing.B, n, port int, create func(i int, addr string) (*mesh.Mesh, error), ready func() error) {
	b.Helper()
	batch := max(1, benchenv.NonNegInt(b, "GW_BENCH_JOIN_BATCH", 20))
	load := max(1, benchenv.NonNegInt(b, "GW_BENCH_JOIN_LOAD", 800))
	converge := benchenv.Duration(b, "GW_BENCH_CONVERGE", 4*time.Minute)
	members := make([]*mesh.Mesh, n)
	b.Cleanup(func() {
		benchenv.Each(n, 32, func(i int) {
			if members[i] != nil {
				members[i].Shutdown()
			}
		})
	})
	begin := time.Now()
	benchenv.StartPaced(b, 0, n, batch, load, func(i, _ int) error {
		addr := fmt.Sprintf("127.0.%d.%d:%d", 40+i/250, 1+i%250, port)
		m, err := create(i, addr)
		if err != nil {
			return fmt.Errorf("member %d at %s: %w", i, addr, err)
		}
		members[i] = m
		return nil
	})
	started := time.Now()
	for {
		err := ready()
		if err == nil {
			break
		}
		if time.Since(started) > converge {
			b.Fatalf("%d members not ready within %v (GW_BENCH_CONVERGE) of the last start: %v", n, converge, err)
		}
		// not a wait: the readiness check's pacing: each asks the aggregator for every node
		time.Sleep(time.Second)
	}
	progress(b, "%d members started in %v, ready %v later", n, started.Sub(begin).Round(time.Millisecond),
		time.Since(started).Round(time.Millisecond))
}

// procRSS is the resident memory of process pid, in bytes (0 if unknown).
func procRSS(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(rest), "%d", &kb)
			return kb << 10
		}
	}
	return 0
}

// procCPU is the CPU time (user and system) of process pid so far.
func procCPU(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command (which may hold spaces) in parentheses.
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}

func ms(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = ms(d)
	}
	return out
}

// progress logs a step (at once with -v: these benchmarks run for
// minutes).
func progress(b *testing.B, format string, args ...any) {
	b.Helper()
	b.Logf(format, args...)
}
