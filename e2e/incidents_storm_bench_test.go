package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/internal/testutil/benchenv"
	"github.com/gracewatch/gracewatch/internal/testutil/looptransport"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// BenchmarkIncidentStorm is issue 16's storm: GW_BENCH_STORM_NODES (default
// 1,000) light simulated agents (memberlist members in this process on
// looptransport, as BenchmarkDownLatency with GW_BENCH_LIGHT=1, each with
// its own node key) joined to a real aggregator process with its default
// [incidents] (the blast-radius limit at 10 % of the known nodes within 10
// minutes, at least 5) and an on="down" actuator (a shell appending to a
// file). Once they are all up and the gossip has calmed, every agent latches
// DOWN within one second, as agents do when one file system dies under
// them: 90 % hung on one Lustre mount, 10 % on a wait channel. It measures
// and checks, from the storm's start until 10 s after the aggregator served
// the last node down:
//
//   - the aggregator's CPU time (/proc/PID/stat) and its peak RSS (VmHWM);
//   - the bytes it logged (info level, JSON), per node;
//   - GET /v1/nodes, polled every 200 ms: its worst latency, and no failure;
//   - the on="down" actuator runs: at most the limit (100 of 1,000), the
//     others held (GET /v1/incidents), in two incidents.
//
// Run with -benchtime 1x; it takes about 5 minutes (most of it the joins).
// BENCHMARKS.md, "Incident storm", has the figures.
func BenchmarkIncidentStorm(b *testing.B) {
	defer benchGC(b)()
	n := benchenv.NonNegInt(b, "GW_BENCH_STORM_NODES", 1000)
	for range b.N {
		incidentStorm(b, n)
	}
}

func incidentStorm(b *testing.B, n int) {
	port := benchenv.NonNegInt(b, "GW_BENCH_PORT", 17962)
	bm := newBenchMesh(b, "storm-")
	actions := filepath.Join(bm.dir, "actions.log")
	g := bm.startAggregator(false, fmt.Sprintf(`
[[actuator]]
on = "down"
command = ["sh", "-c", "echo \"$0\" >> %s", "{node}"]
timeout = "10s"
`, actions))

	// The members' own failure detection is not what the storm measures
	// (the aggregator's is unchanged): with GW_BENCH_STORM_QUIET=1
	// (default) they probe and gossip five times slower, which is what
	// lets 1,000 of them and their n² gossip fit on 2 cores.
	quiet := os.Getenv("GW_BENCH_STORM_QUIET") != "0"
	agents := bm.startAgents(n, port, g.url, true, false, quiet)
	// not a wait: the members settle (GW_BENCH_SETTLE) before the measurement begins
	time.Sleep(benchenv.Duration(b, "GW_BENCH_SETTLE", max(10*time.Second, time.Duration(n)*30*time.Millisecond)))

	pid := g.cmd.Process.Pid
	logs0, cpu0, begin := len(g.logs.String()), procCPU(pid), time.Now()

	// GET /v1/nodes keeps answering: polled every 200 ms by curl, a
	// process of its own (this one is saturated by the members' gossip,
	// and would measure its own scheduling delays).
	stop := make(chan struct{})
	var pollMu sync.Mutex
	var worst time.Duration
	polls, failures := 0, 0
	var pollWG sync.WaitGroup
	pollWG.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			out, err := exec.Command("curl", "-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code} %{time_total}", g.url+"/v1/nodes").Output()
			f := strings.Fields(string(out))
			var d time.Duration
			ok := err == nil && len(f) == 2 && f[0] == "200"
			if ok {
				sec, perr := strconv.ParseFloat(f[1], 64)
				ok, d = perr == nil, time.Duration(sec*float64(time.Second))
			}
			pollMu.Lock()
			polls++
			worst = max(worst, d)
			if !ok {
				failures++
			}
			pollMu.Unlock()
		}
	})

	// The storm: every agent latches DOWN within one second.
	var undelivered atomic.Int64
	d := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	var wg sync.WaitGroup
	for i, a := range agents {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * time.Second / time.Duration(n)) // not a wait: the storm's pacing, n DOWNs over one second
			cause := &gwpb.Cause{Fstype: "lustre", Source: "mds1@o2ib:/scratch", Mountpoint: "/scratch", Wchan: "ptlrpc_set_wait",
				Class: "unkillable", Unkillable: 1, ExamplePid: int32(1000 + i), ExampleComm: "cp", Job: strconv.Itoa(i)}
			if i%10 == 9 {
				cause = &gwpb.Cause{Wchan: "io_schedule", Class: "killable-d", KillableD: 1, ExamplePid: int32(1000 + i), ExampleComm: "dd", Job: strconv.Itoa(i)}
			}
			reason := fmt.Sprintf("job %d teardown exceeded grace 2m0s: 1 %s (pid %d %s, D in %s)", i, cause.Class, cause.ExamplePid, cause.ExampleComm, cause.Wchan)
			meta := a.meta(gwpb.State_STATE_DOWN, time.Now(), reason, d)
			td := &gwpb.Teardown{Job: strconv.Itoa(i), Phase: "overdue", DeadlineMs: d.UnixMilli(), GraceMs: 120000}
			if !a.deliver(meta, &gwpb.StateUpdate{Meta: meta, Reason: reason, Teardowns: []*gwpb.Teardown{td},
				StartedMs: a.started.UnixMilli(), Cause: cause}) {
				undelivered.Add(1)
			}
		})
	}
	wg.Wait()
	if u := undelivered.Load(); u > 0 {
		b.Errorf("%d of %d DOWN updates not delivered within %v of retries", u, n, deliverFor)
	}
	sent := time.Since(begin)
	var allDown time.Duration
	ns, err, ok := testutil.PollRead(2*time.Minute-time.Since(begin), func() ([]node, error) { return fetchNodes(g.url + "/v1/nodes?state=down") },
		func(ns []node) bool { return len(ns) == n })
	if !ok {
		all, _ := fetchNodes(g.url + "/v1/nodes")
		var others []string
		for _, x := range all {
			if x.State != "down" && len(others) < 10 {
				others = append(others, fmt.Sprintf("%s %s since %s (%s)", x.Name, x.State, x.Since.Format(time.StampMilli), x.Reason))
			}
		}
		b.Fatalf("after 2 min the aggregator serves %d of %d nodes down (%v); not down: %s", len(ns), n, err, strings.Join(others, "; "))
	}
	allDown = time.Since(begin)
	time.Sleep(10 * time.Second) // not a wait: the measurement window: the actuators' runs, and what follows
	close(stop)
	pollWG.Wait()
	for _, a := range agents {
		a.metas.Wait()
	}
	window := time.Since(begin)
	cpu := procCPU(pid) - cpu0
	logBytes := len(g.logs.String()) - logs0
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	hwm := ""
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			hwm = strings.TrimSpace(strings.TrimPrefix(l, "VmHWM:"))
		}
	}
	hwmKB, _ := strconv.Atoi(strings.TrimSuffix(hwm, " kB"))
	data, _ := os.ReadFile(actions)
	runs := len(strings.Fields(string(data)))
	var il api.IncidentList
	if err := json.Unmarshal([]byte(get(b, g.url+"/v1/incidents", "")), &il); err != nil {
		b.Fatal(err)
	}
	logs := g.logs.String()[logs0:]
	incidentLines := strings.Count(logs, `"msg":"incident `)
	lines := strings.Count(logs, "\n")
	counts := []string{}
	for _, inc := range il.Incidents {
		counts = append(counts, fmt.Sprintf("%d: %s %d nodes, %d held", inc.ID, inc.Cause, inc.Count, inc.HeldCount))
	}
	slices.Sort(counts)

	progress(b, "%d DOWN sent in %v; all served down %v after the first; the aggregator used %.2f s of CPU in %v (%.2f cores), peak RSS %s",
		n, ms(sent), ms(allDown), cpu.Seconds(), ms(window), cpu.Seconds()/window.Seconds(), hwm)
	progress(b, "logged %d bytes in %d lines (%.0f bytes per node), %d incident lines; GET /v1/nodes: %d polls, worst %v, %d failed",
		logBytes, lines, float64(logBytes)/float64(n), incidentLines, polls, ms(worst), failures)
	progress(b, "actuator runs %d (limit %d of %d known), held %d; incidents: %s", runs, il.Limit.Limit, il.Limit.KnownNodes, il.Limit.Held,
		strings.Join(counts, "; "))
	// This process: the n members (their tables grow as n²).
	runtime.GC()
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	progress(b, "the members' process: live heap %d MiB (%.0f KiB per member), RSS %d MiB",
		mem.HeapAlloc>>20, float64(mem.HeapAlloc)/1024/float64(n), procRSS(os.Getpid())>>20)
	b.ReportMetric(float64(mem.HeapAlloc)/float64(n), "heap-B/member")
	b.ReportMetric(cpu.Seconds(), "agg-cpu-s")
	b.ReportMetric(float64(hwmKB)/1024, "agg-peak-rss-MiB")
	b.ReportMetric(float64(logBytes)/float64(n), "log-bytes/node")
	b.ReportMetric(float64(worst)/1e6, "nodes-worst-ms")
	b.ReportMetric(float64(runs), "actuator-runs")
	b.ReportMetric(allDown.Seconds(), "all-down-s")

	// The bounds (BENCHMARKS.md says why these).
	limit := max(5, n/10)
	switch {
	case runs > limit || runs < limit:
		b.Errorf("%d actuator runs, want the limit, %d", runs, limit)
	case il.Limit.Held != n-limit:
		b.Errorf("%d drains held, want %d", il.Limit.Held, n-limit)
	case len(il.Incidents) != 2:
		b.Errorf("incidents %q, want 2", counts)
	}
	if failures > 0 || worst > 2*time.Second {
		b.Errorf("GET /v1/nodes: %d of %d polls failed, worst %v (want none, under 2 s)", failures, polls, worst)
	}
	if per := float64(logBytes) / float64(n); per > 1024 || incidentLines > 6 {
		b.Errorf("%.0f log bytes per node, %d incident lines: want under 1 KiB per node (its one state line, its drain's) and a few incident lines", per, incidentLines)
	}
	if cpu > 30*time.Second || hwmKB > 512<<10 {
		b.Errorf("the aggregator used %v of CPU and %s at its peak: want under 30 s and 512 MiB", cpu, hwm)
	}
}

// benchMesh is a benchmark's mesh as deployed: a mesh key made by
// `aggregator keygen`, the site's keys (node restriction), a label of its
// own, and the aggregator's seed address.
type benchMesh struct {
	b                         *testing.B
	dir, keyfile, label, seed string
	keys                      *siteKeys
	site                      [][]byte
	aggKeys                   *mesh.Keys
	// stateDir, if set, is the aggregator's state_dir (kept across its
	// restarts).
	stateDir string
}

func newBenchMesh(b *testing.B, prefix string) *benchMesh {
	b.Helper()
	bm := &benchMesh{b: b, dir: b.TempDir()}
	bm.keyfile = filepath.Join(bm.dir, "mesh.key")
	if out, err := exec.Command(bins.aggregator, "keygen", bm.keyfile).CombinedOutput(); err != nil {
		b.Fatalf("keygen: %v %s", err, out)
	}
	bm.keys = newSiteKeys(b, bm.dir)
	var err error
	if bm.site, err = mesh.LoadSiteKeys(bm.keys.site); err != nil {
		b.Fatal(err)
	}
	if bm.aggKeys, err = mesh.AggregatorKeys(bm.site); err != nil {
		b.Fatal(err)
	}
	bm.label = prefix + filepath.Base(bm.dir)
	bm.seed = fmt.Sprintf("127.0.0.1:%d", freePort(b))
	return bm
}

// startAggregator starts the bench's aggregator, agg-1, seeded at bm.seed,
// with allow_unsigned as given, bm.stateDir as its state_dir (if set) and
// extra appended to its configuration, and returns it once it is healthy.
// It is stopped when the benchmark ends.
func (bm *benchMesh) startAggregator(unsigned bool, extra string) *aggregator {
	b := bm.b
	b.Helper()
	hport := freePort(b)
	cfg := filepath.Join(bm.dir, "aggregator.toml")
	top := ""
	if bm.stateDir != "" {
		top = fmt.Sprintf("state_dir = %q\n", bm.stateDir)
	}
	text := fmt.Sprintf(`name = "agg-1"
log_format = "json"
log_level = "info"
%s
[mesh]
bind = %q
label = %q
keyring = %q
site_key_file = %q
allow_unsigned = %t

[http]
listen = "127.0.0.1:%d"
`, top, bm.seed, bm.label, bm.keyfile, bm.keys.site, unsigned, hport) + extra
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		b.Fatal(err)
	}
	g := &aggregator{proc: &proc{t: b, name: "agg-1", args: []string{bins.aggregator, "serve", "--config", cfg}, logs: &testutil.SyncBuffer{}},
		url: fmt.Sprintf("http://127.0.0.1:%d", hport), config: cfg}
	g.start()
	b.Cleanup(func() { g.stop(); g.dumpIfFailed() })
	g.waitReady()
	return g
}

// startAgents starts n simulated agents (simAgent) on startSwarm's
// addresses from port, each announcing its state to the aggregators as a
// real agent does when it sees one (with node restriction the only way
// in), and returns them once the aggregator at aggURL serves all n up.
func (bm *benchMesh) startAgents(n, port int, aggURL string, light, unsigned, quiet bool) []*simAgent {
	agents := make([]*simAgent, n)
	startSwarm(bm.b, n, port, func(i int, addr string) (*mesh.Mesh, error) {
		a, meta, m, err := bm.simAgent(i, addr, light, unsigned, quiet)
		if err != nil {
			return nil, err
		}
		a.m = m
		agents[i] = a
		go a.announce(meta)
		return m, nil
	}, func() error {
		ns, err := fetchNodes(aggURL + "/v1/nodes?state=up")
		switch {
		case err != nil:
			return err
		case len(ns) != n:
			return fmt.Errorf("the aggregator serves %d of %d nodes up", len(ns), n)
		}
		return nil
	})
	return agents
}

// simAgent starts simulated agent i (node%04d) at addr, up, joined to the
// seed: it proves itself with its own node key, as a real one does (the
// aggregator checks every meta and update), unless unsigned (then it runs
// with allow_unsigned and no keys); light puts it on looptransport
// without compression, and quiet (with light) makes it probe, gossip and
// push-pull five times less often. The caller announces its meta.
func (bm *benchMesh) simAgent(i int, addr string, light, unsigned, quiet bool) (*simAgent, *gwpb.Meta, *mesh.Mesh, error) {
	mc := mesh.DefaultConfig()
	mc.Bind, mc.Label, mc.Keyring, mc.Join = addr, bm.label, bm.keyfile, []string{bm.seed}
	a := &simAgent{name: fmt.Sprintf("node%04d", i), started: time.Now()}
	meta := a.meta(gwpb.State_STATE_UP, time.Now(), "", time.Time{})
	ak, err := mesh.AgentKeys(mesh.NodeKey(bm.site[0], a.name), bm.aggKeys.PublicKeys())
	if err != nil {
		return nil, nil, nil, err
	}
	o := mesh.Options{Name: a.name, Role: gwpb.Role_ROLE_AGENT, Config: mc, Meta: meta, Profile: "lan", Keys: ak}
	if unsigned {
		o.Keys, o.Config.AllowUnsigned = nil, true
	}
	var t *looptransport.Transport
	if light {
		if t, err = looptransport.New(addr); err != nil {
			return nil, nil, nil, err
		}
		o.Tune = func(c *memberlist.Config) {
			c.Transport, c.EnableCompression = t, false
			if quiet {
				c.ProbeInterval *= 5
				c.GossipInterval *= 5
				c.PushPullInterval *= 5
			}
		}
	}
	m, err := mesh.New(o)
	if err != nil {
		if t != nil {
			t.Shutdown()
		}
		return nil, nil, nil, err
	}
	return a, meta, m, nil
}

// deliverFor bounds how long a simulated agent retries its StateUpdate.
const deliverFor = 30 * time.Second

// deliver publishes meta and sends u as the real agent's sender does
// (agent/meshlink/sender.go): to every aggregator of the book, whatever memberlist
// says of its liveness, again 500 ms after a failed attempt, doubling to
// 8 s, until each took it or deliverFor passed. It reports whether every
// one did.
func (a *simAgent) deliver(meta *gwpb.Meta, u *gwpb.StateUpdate) bool {
	a.metas.Go(func() { a.m.SetMeta(meta) })
	env := &gwpb.Envelope{Body: &gwpb.Envelope_State{State: u}}
	pending := map[string]bool{}
	for _, ag := range a.m.Aggregators() {
		pending[ag.Name] = true
	}
	if len(pending) == 0 {
		return false
	}
	wait := 500 * time.Millisecond
	for end := time.Now().Add(deliverFor); ; {
		for name := range pending {
			if a.m.Send(name, env) == nil {
				delete(pending, name)
			}
		}
		if len(pending) == 0 {
			return true
		}
		if time.Now().Add(wait).After(end) {
			return false
		}
		time.Sleep(wait) // not a wait: the back-off between a simulated agent's delivery attempts
		wait = min(2*wait, 8*time.Second)
	}
}
