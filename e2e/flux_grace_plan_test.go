package e2e

// Fluxion plans with the grace period (docs/DESIGN.md, "Flux: the plan
// carries G"): the gracewatch jobtap plugin (flux/jobtap/gracewatch.c)
// makes the scheduler allocate every job with a time limit T for T + G,
// and the exec system still ends the job at its own E = start + T.

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// fluxPlanG is G of TestFluxGracePlan, the agents' and the plugin's: long
// enough for one-node jobs to backfill within it on a slow machine.
const fluxPlanG = 15 * time.Second

var jobtapBuild struct {
	once sync.Once
	path string
	err  error
}

// jobtapPlugin builds the gracewatch jobtap plugin against the Flux of
// prefix (make -C flux/jobtap FLUX_PREFIX=prefix, what .ci/run and
// packaging/build.sh do) and returns the path of gracewatch.so.
func jobtapPlugin(t testing.TB, prefix string) string {
	t.Helper()
	jobtapBuild.once.Do(func() {
		dir, err := filepath.Abs(filepath.Join("..", "flux", "jobtap"))
		if err != nil {
			jobtapBuild.err = err
			return
		}
		out, err := exec.Command("make", "-C", dir, "FLUX_PREFIX="+prefix).CombinedOutput()
		if err != nil {
			jobtapBuild.err = fmt.Errorf("make -C %s FLUX_PREFIX=%s: %v\n%s", dir, prefix, err, out)
			return
		}
		jobtapBuild.path = filepath.Join(dir, "gracewatch.so")
	})
	if jobtapBuild.err != nil {
		t.Fatal(jobtapBuild.err)
	}
	return jobtapBuild.path
}

// fluxEvent is one entry of a job's eventlog.
type fluxEvent struct {
	Timestamp float64         `json:"timestamp"`
	Name      string          `json:"name"`
	Context   json.RawMessage `json:"context"`
}

func (s *fluxSite) eventlog(j fluxJob) []fluxEvent {
	s.t.Helper()
	var evs []fluxEvent
	for _, line := range strings.Split(s.must("job", "eventlog", "--format=json", j.f58), "\n") {
		var ev fluxEvent
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Name != "" {
			evs = append(evs, ev)
		}
	}
	return evs
}

// baseExpiration is the expiration of the job's R as the scheduler wrote
// it (flux job info --base), before any resource-update.
func (s *fluxSite) baseExpiration(j fluxJob) float64 { return s.rExpiration(j, "--base") }

// planWithout reports whether GRACEWATCH_COMPARE_WITHOUT switches the
// plugin off: the negative control of TestFluxGracePlan.
func planWithout(t testing.TB) bool { return compareWithout(t, "plan") }

// signalJob is a job on fake0 with time limit limit that writes the name
// of the signal that ends it to file.
func (s *fluxSite) signalJob(name, limit, file string) fluxJob {
	s.t.Helper()
	script := fmt.Sprintf(`for sig in ALRM TERM INT HUP USR1 USR2; do trap "echo $sig >>%[1]s; exit 1" $sig; done; sleep 300 & wait`, file)
	return s.submit("-N1", "--requires=rank:0", "-t", limit, "--job-name="+name, "sh", "-c", script)
}

// TestFluxGracePlan: four fake nodes, Fluxion (easy), the shipped prolog
// and housekeeping wiring with one agent per node, and the gracewatch
// jobtap plugin, all with G = fluxPlanG. A job with an 8 s limit on fake0
// ends at its start + 8 s by the exec system's own timeout (not G later),
// its housekeeping hangs; a job that needs the four nodes is planned at
// E + G at every sample while one-node jobs backfill; at E + G fake0 is
// drained with the diagnosis. Then a housekeeping within G gives the node
// back at once; then a reload of Fluxion and a restart of the job manager
// keep every limit and double-book no node.
func TestFluxGracePlan(t *testing.T) {
	planG := fluxPlanG
	if planWithout(t) {
		planG = 0
	}
	g := startGracewatchFluxPlan(t, fluxPlanG, planG)
	s, agg := g.s, g.agg

	ok := t.Run("the job ends at its own E; the plan holds fake0 until E + G; drained there", func(t *testing.T) {
		hang := startHangfs(t, s.path("fuse-plan"))
		s.housekeeping("fake0", "cat "+hang.file()+" >/dev/null")
		defer s.housekeeping("fake0", "")
		sigs := s.path("signals-hung")
		hung := s.signalJob("hung", "8s", sigs)
		s.waitJob(hung, "running", 30*time.Second, func(i jobInfo) bool { return i.State == "RUN" })
		big := s.submit("-N4", "-t", "1m", "--job-name=big", "true")
		// One-node jobs that fit before the 4-node job's reservation at
		// E + G: the plan holds each for its T + G too (2 s + G).
		var short []fluxJob
		for range 3 {
			short = append(short, s.submit("-N1", "-t", "2s", "--job-name=short", "sleep", "1"))
		}

		// R: the scheduler's expiration is E + G, the exec system's E.
		// Neither flux jobs nor flux job timeleft says more than E.
		e := unixTime(s.expiration(hung))
		planned := unixTime(s.baseExpiration(hung))
		info := s.waitJob(hung, "listed with its expiration", 10*time.Second, func(i jobInfo) bool { return i.Expiration > 0 })
		t.Logf("hung job %s: started %s, E %s (flux jobs: %s), the scheduler's R: E%+.3fs",
			hung.f58, unixTime(info.TRun).Format(time.TimeOnly), e.Format(time.TimeOnly),
			unixTime(info.Expiration).Format(time.TimeOnly), planned.Sub(e).Seconds())
		if d := planned.Sub(e); d.Round(time.Millisecond) != planG {
			t.Errorf("the scheduler's expiration is E%+v, want E + G (%v)", d, planG)
		}
		if math.Abs(info.Expiration-float64(e.UnixNano())/1e9) > 0.01 {
			t.Errorf("flux jobs says expiration %v, R says E %v", info.Expiration, e)
		}
		asked := time.Now()
		out := strings.TrimSpace(s.must("job", "timeleft", hung.f58))
		if left, err := strconv.Atoi(out); err != nil || time.Duration(left)*time.Second > e.Sub(asked)+time.Second {
			t.Errorf("flux job timeleft says %q s, %v were left to E", out, e.Sub(asked).Round(time.Second))
		}

		// The end at E: the exec system's own timeout exception and
		// SIGALRM, as without the plugin.
		hkStart := s.hkStart(hung, "fake0", time.Until(e)+30*time.Second)
		var excs []fluxEvent
		for _, ev := range s.eventlog(hung) {
			if ev.Name == "exception" {
				excs = append(excs, ev)
			}
		}
		if len(excs) != 1 {
			t.Fatalf("job %s has %d exception events, want the timeout alone: %+v", hung.f58, len(excs), s.eventlog(hung))
		}
		exc := excs[0]
		var ctx struct {
			Type     string `json:"type"`
			Severity int    `json:"severity"`
			Note     string `json:"note"`
		}
		json.Unmarshal(exc.Context, &ctx)
		at := unixTime(exc.Timestamp)
		t.Logf("exception at E%+.3fs: %+v; housekeeping started E%+.3fs", at.Sub(e).Seconds(), ctx, hkStart.Sub(e).Seconds())
		if ctx.Type != "timeout" || ctx.Severity != 0 || ctx.Note != "resource allocation expired" {
			t.Errorf("exception %+v, want the exec system's timeout (severity 0, \"resource allocation expired\")", ctx)
		}
		if at.Before(e) || at.After(e.Add(2*time.Second)) {
			t.Errorf("the timeout came at E%+.3fs, want at E (within 2 s)", at.Sub(e).Seconds())
		}
		if b, _ := os.ReadFile(sigs); strings.TrimSpace(string(b)) != "ALRM" {
			t.Errorf("the job's tasks got %q, want ALRM (the exec system's timeout signal)", b)
		}

		// The agent: E is the user's, D = E + G = the scheduler's plan;
		// the aggregator serves free_at = E + G.
		a := g.agents["fake0"]
		j := jobDeadline(t, a, hung.dec)
		if j.Expiration == nil || !j.Expiration.Equal(e) {
			t.Fatalf("the agent has E = %v for job %s, the user's E is %v", j.Expiration, hung.dec, e)
		}
		n := agg.waitNode(t, "fake0", "teardown", 20*time.Second, func(n node) bool { return n.State == "teardown" && n.FreeAt != nil })
		t.Logf("the aggregator serves fake0 %s with free_at E%+.3fs", n.State, n.FreeAt.Sub(e).Seconds())
		if !n.FreeAt.Equal(planned) {
			t.Errorf("free_at %v, the plugin's E + G %v", n.FreeAt, planned)
		}

		// While it hangs: the 4-node job is planned at E + G at every
		// sample; one-node jobs backfill on fake1..fake3.
		samples, bad := 0, []string{}
		for time.Now().Before(planned.Add(-time.Second)) {
			info, err := s.job(big)
			if err != nil {
				t.Fatal(err)
			}
			samples++
			if est := info.estimate(); est == nil || est.Sub(planned).Abs() > time.Second {
				bad = append(bad, fmt.Sprintf("%s at E%+.1fs", planned0(info, e), time.Since(e).Seconds()))
			}
			time.Sleep(500 * time.Millisecond) // not a wait: the plan's sampling interval
		}
		t.Logf("the 4-node job's t_estimate: %d samples until E + G - 1 s, %d not E + G: %v", samples, len(bad), bad)
		if len(bad) > 0 || samples == 0 {
			t.Errorf("the 4-node job's t_estimate was not E + G at %d of %d samples: %v", len(bad), samples, bad)
		}
		var starts []string
		for _, j := range short {
			si := s.waitJob(j, "started", 30*time.Second, func(i jobInfo) bool { return i.TRun > 0 })
			starts = append(starts, fmt.Sprintf("E%+.1fs on %s", unixTime(si.TRun).Sub(e).Seconds(), si.Nodelist))
			if si.Nodelist == "fake0" || unixTime(si.TRun).After(planned) {
				t.Errorf("short job %s started at E%+.1fs on %s: want before E + G, not on fake0", j.f58, unixTime(si.TRun).Sub(e).Seconds(), si.Nodelist)
			}
		}

		// At E + G = D: drained with the diagnosis; the 4-node job is
		// no longer planned at E + G (it cannot run without fake0).
		var evs []drainEvent
		testutil.Eventually(t, time.Until(planned)+30*time.Second, "fake0 drained in Flux", func() bool {
			evs = s.drains(0)
			return len(evs) > 0
		})
		t.Logf("one-node jobs started %v; fake0 drained at E + G%+.3fs", starts, evs[0].At.Sub(planned).Seconds())
		drainedNearD(t, "plan with G", planned, evs[0].At)
		if own, _ := ownReason(t, evs[0].Reason); !strings.HasPrefix(own, fmt.Sprintf("gracewatch: job %s teardown exceeded grace %v", hung.dec, fluxPlanG)) {
			t.Errorf("Flux's drain reason %q", evs[0].Reason)
		}
		if err := hang.stop(); err != nil {
			t.Fatal(err)
		}
		s.waitNode("fake0", "drained after its housekeeping", 20*time.Second, func(st, _ string) bool { return st == "drained" })
		// Drained, fake0 is out of the plan: the 4-node job (which
		// needs it) waits until an administrator resumes the node, then
		// starts at once.
		info, err := s.job(big)
		if err != nil || info.TRun > 0 {
			t.Fatalf("the 4-node job started (%v) while fake0 was drained", err)
		}
		t.Logf("fake0 drained; the 4-node job pending (t_estimate %s)", planned0(info, e))
		resumed := time.Now()
		aggregatorCLI(t, g.c, agg, "resume", "fake0", "--reason", "FUSE server restarted")
		s.waitNode("fake0", "undrained", 15*time.Second, func(st, _ string) bool { return st == "avail" })
		info = s.waitJob(big, "started after the resume", 20*time.Second, func(i jobInfo) bool { return i.TRun > 0 })
		t.Logf("resumed: the 4-node job started %v later", unixTime(info.TRun).Sub(resumed).Round(time.Millisecond))
		s.waitJob(big, "inactive", 30*time.Second, func(i jobInfo) bool { return i.State == "INACTIVE" })
	})
	if !ok {
		return
	}

	ok = t.Run("a housekeeping within G gives the node back at once", func(t *testing.T) {
		end := s.path("hk-end-fake0")
		s.housekeeping("fake0", "sleep 2; date +%s.%N >"+end)
		defer s.housekeeping("fake0", "")
		hung := s.submit("-N1", "--requires=rank:0", "-t", "3s", "--job-name=slow", "sleep", "300")
		s.waitJob(hung, "running", 30*time.Second, func(i jobInfo) bool { return i.State == "RUN" })
		big := s.submit("-N4", "-t", "1m", "--job-name=big", "true")
		planned := unixTime(s.baseExpiration(hung))
		hkEnd, err := waitStamp(end, 60*time.Second)
		if err != nil {
			t.Fatalf("the housekeeping did not end: %v", err)
		}
		info := s.waitJob(big, "started", 20*time.Second, func(i jobInfo) bool { return i.TRun > 0 })
		started := unixTime(info.TRun)
		t.Logf("housekeeping ended E + G%+.1fs, the 4-node job started %v after it", hkEnd.Sub(planned).Seconds(), started.Sub(hkEnd).Round(time.Millisecond))
		if !hkEnd.Before(planned) || started.Sub(hkEnd) > 3*time.Second {
			t.Errorf("the housekeeping ended at E + G%+v, the 4-node job started %v later: want before E + G and within 3 s", hkEnd.Sub(planned), started.Sub(hkEnd))
		}
		s.waitJob(big, "inactive", 30*time.Second, func(i jobInfo) bool { return i.State == "INACTIVE" })
	})
	if !ok {
		return
	}

	ok = t.Run("a reload of Fluxion and a restart of the job manager keep every limit", func(t *testing.T) {
		fluxGraceRestart(t, g, planG)
	})
	if !ok || planG == 0 {
		return
	}
	t.Run("a queue whose plugin G is not the agents' is reported", func(t *testing.T) { fluxGraceMismatch(t, g, planG) })
	t.Run("without the plugin", func(t *testing.T) { fluxGraceUnloaded(t, g, planG) })
}

func planned0(info jobInfo, e time.Time) string {
	est := info.estimate()
	if est == nil {
		return "none"
	}
	return fmt.Sprintf("E%+.1fs", est.Sub(e).Seconds())
}

// fluxGraceRestart: a job on fake0 whose housekeeping hangs (allocated
// under the plugin, E + G in the scheduler's R) and a held job (pending,
// T + G in its jobspec); Fluxion is reloaded, then the job manager
// restarted (with the modules that need it, as rc3 and rc1 do): the
// pending job's jobspec carries its T + G once, not twice; the 4-node job
// is still planned at the hung job's E + G; a job that needs fake0 does
// not start on it while it is held; a new job gets T + G.
func fluxGraceRestart(t *testing.T, g *gracewatchFlux, planG time.Duration) {
	s := g.s
	hang := startHangfs(t, s.path("fuse-restart"))
	s.housekeeping("fake0", "cat "+hang.file()+" >/dev/null")
	defer s.housekeeping("fake0", "")
	hung := s.submit("-N1", "--requires=rank:0", "-t", "3s", "--job-name=hung", "sleep", "300")
	held := s.submit("--urgency=0", "-N1", "-t", "20s", "--job-name=held", "true")
	s.waitJob(hung, "running", 30*time.Second, func(i jobInfo) bool { return i.State == "RUN" })
	planned := unixTime(s.baseExpiration(hung))
	s.hkStart(hung, "fake0", 30*time.Second)
	big := s.submit("-N4", "-t", "1m", "--job-name=big", "true")
	onPlan := func(i jobInfo) bool { e := i.estimate(); return e != nil && e.Sub(planned).Abs() <= time.Second }
	s.waitJob(big, "planned at E + G", 20*time.Second, onPlan)
	duration := func(j fluxJob) (float64, string) {
		var js struct {
			Attributes struct {
				System struct {
					Duration   float64         `json:"duration"`
					Gracewatch json.RawMessage `json:"gracewatch"`
				} `json:"system"`
			} `json:"attributes"`
		}
		out := s.must("job", "info", j.f58, "jobspec")
		if err := json.Unmarshal([]byte(out), &js); err != nil {
			t.Fatal(err)
		}
		return js.Attributes.System.Duration, string(js.Attributes.System.Gracewatch)
	}
	wantHeld := 20 + planG.Seconds()
	check := func(when string) {
		t.Helper()
		if d, rec := duration(held); d != wantHeld {
			t.Errorf("%s: the held job's duration is %v (%s), want T + G = %v", when, d, rec, wantHeld)
		}
		// Until E + G (less a second for the sample); past it gracewatch
		// drains fake0 and the plan changes, as it should.
		if planG > 0 && time.Until(planned) > 2*time.Second {
			s.waitJob(big, "planned at E + G "+when, time.Until(planned)-time.Second, onPlan)
		} else {
			t.Logf("%s: E + G was %v ago; the plan is not checked", when, time.Since(planned).Round(time.Millisecond))
		}
		if st, _, err := s.node("fake0"); err != nil || (st != "housekeeping" && !drainedState(st)) {
			t.Errorf("%s: fake0 is %q (%v), want still in housekeeping", when, st, err)
		}
	}
	check("before")

	s.reloadFluxion()
	check("after a reload of Fluxion")
	// A job that needs fake0 while it is held: Fluxion must not place it.
	probe := s.submit("-N1", "--requires=rank:0", "-t", "5s", "--job-name=probe", "true")
	if err := hang.stop(); err != nil {
		t.Fatal(err)
	}
	hkEnd := time.Now()
	s.waitNode("fake0", "out of housekeeping", 20*time.Second, func(st, _ string) bool { return st != "housekeeping" && st != "draining" })
	if evs := s.drains(0); len(evs) > 0 {
		aggregatorCLI(t, g.c, g.agg, "resume", "fake0", "--reason", "FUSE server restarted")
		s.waitNode("fake0", "undrained", 15*time.Second, func(st, _ string) bool { return st == "avail" })
	}
	info := s.waitJob(probe, "started once fake0's housekeeping ended", 30*time.Second, func(i jobInfo) bool { return i.TRun > 0 })
	if started := unixTime(info.TRun); started.Before(hkEnd) {
		t.Errorf("the job that needs fake0 started %v before fake0's housekeeping ended", hkEnd.Sub(started))
	}

	// The job manager and what depends on it, as rc3 then rc1 (the
	// scheduler first, job-exec, job-list). flux-core keeps housekeeping
	// in the job manager's memory only, and its bulk exec cannot reattach
	// to running jobs: a restart with either releases or ends them,
	// plugin or not (packaging/README.md). With the held job pending,
	// the limits are what is checked here.
	for _, args := range [][]string{
		{"module", "remove", "-f", "sched-fluxion-feasibility"},
		{"module", "remove", "-f", "sched-fluxion-qmanager"},
		{"module", "remove", "-f", "sched-fluxion-resource"},
		{"module", "remove", "-f", "job-list"},
		{"module", "remove", "-f", "job-exec"},
		{"module", "reload", "job-manager"},
		{"module", "load", "job-exec"},
		{"module", "load", "job-list"},
		{"module", "load", "sched-fluxion-resource", "load-allowlist=node,core,gpu"},
		{"module", "load", "sched-fluxion-feasibility", "load-allowlist=node,core,gpu"},
		{"module", "load", "sched-fluxion-qmanager"},
	} {
		s.must(args...)
	}
	if d, rec := duration(held); d != wantHeld {
		t.Errorf("after a restart of the job manager the held job's duration is %v (%s), want T + G = %v", d, rec, wantHeld)
	}
	fresh := s.submit("--urgency=0", "-N1", "-t", "7s", "--job-name=fresh", "true")
	if d, rec := duration(fresh); d != 7+planG.Seconds() {
		t.Errorf("a job submitted after the restart has duration %v (%s), want %v", d, rec, 7+planG.Seconds())
	}
	// A job started after the restart ends at its own E.
	after := s.submit("-N1", "-t", "2s", "--job-name=after-restart", "sleep", "300")
	s.waitJob(after, "inactive", 60*time.Second, func(i jobInfo) bool { return i.State == "INACTIVE" })
	if e, planned := s.expiration(after), s.baseExpiration(after); planned-e != planG.Seconds() {
		t.Errorf("a job run after the restart: E %v, the scheduler's %v: want E + G", e, planned)
	}

	// A job submitted while the plugin is not loaded gets G when it is
	// loaded again (it is still pending), and only that job: a job
	// already planned with G keeps its own limit. (At the load flux-core
	// calls job.new in a loop where an update of the current job is
	// stored but posted to whichever job passes a callback next: the
	// plugin sends its update by job id once the loop is over.)
	plugin := jobtapPlugin(t, s.prefix)
	withG := s.submit("--urgency=0", "-N1", "-t", "5s", "--job-name=held-with-g", "true")
	s.must("jobtap", "remove", "gracewatch.so")
	before := s.submit("--urgency=0", "-N1", "-t", "9s", "--job-name=before-load", "true")
	if d, rec := duration(before); d != 9 || rec != "" {
		t.Errorf("without the plugin a job has duration %v (%s), want 9 and no record", d, rec)
	}
	plannedD, plannedRec := duration(withG)
	if plannedD != 5+planG.Seconds() {
		t.Errorf("a job submitted with the plugin has duration %v (%s), want %v", plannedD, plannedRec, 5+planG.Seconds())
	}
	s.must("jobtap", "load", plugin)
	// The plugin's update is an event of the job's eventlog, which
	// reaches the KVS (what flux job info reads) in a later batch.
	var d float64
	var rec string
	if !testutil.Poll(60*time.Second, func() bool { d, rec = duration(before); return d == 9+planG.Seconds() }) {
		t.Errorf("after the plugin's load the job submitted before has duration %v (%s), want %v", d, rec, 9+planG.Seconds())
	}
	if d, rec := duration(withG); d != plannedD || rec != plannedRec {
		t.Errorf("after the plugin's load a job planned with G before has duration %v (%s), want %v (%s) as before", d, rec, plannedD, plannedRec)
	}

	// A bad [gracewatch] table is refused, by name, at a config reload
	// and at the plugin's load; the plugin loaded keeps its G.
	good := s.must("config", "get")
	for key, bad := range map[string]string{
		"grace":        `{"grace": "5x"}`,
		"negative":     `{"grace": -1}`,
		"graze":        `{"grace": "1s", "graze": 1}`,
		"queues.debug": `{"grace": "1s", "queues": {"debug": "8d"}}`,
	} {
		var conf map[string]any
		if err := json.Unmarshal([]byte(good), &conf); err != nil {
			t.Fatal(err)
		}
		var table any
		json.Unmarshal([]byte(bad), &table)
		conf["gracewatch"] = table
		text, _ := json.Marshal(conf)
		out, err := s.configLoad(string(text))
		if err == nil || !strings.Contains(string(out), key) {
			t.Errorf("flux config load of [gracewatch] %s: %v %q, want refused naming %q", bad, err, out, key)
		}
	}
	afterBad := s.submit("--urgency=0", "-N1", "-t", "4s", "--job-name=after-bad", "true")
	if d, rec := duration(afterBad); d != 4+planG.Seconds() {
		t.Errorf("after the refused configs a job has duration %v (%s), want %v", d, rec, 4+planG.Seconds())
	}
	s.must("cancel", held.f58, fresh.f58, before.f58, afterBad.f58)
	for _, j := range []fluxJob{hung, held, big, probe, fresh, before, afterBad} {
		s.waitJob(j, "inactive", 60*time.Second, func(i jobInfo) bool { return i.State == "INACTIVE" })
	}
}

// planHook checks, at every sample of fluxPlanScenario before E + G
// (less a second), that the 4-node job is planned at the hung job's
// E + G, the scheduler's expiration with the gracewatch jobtap plugin.
func planHook(t *testing.T, s *fluxSite) func(time.Duration, time.Time, fluxJob, *fluxPlanRun) {
	var planned time.Time
	return func(_ time.Duration, _ time.Time, big fluxJob, r *fluxPlanRun) {
		if planned.IsZero() {
			planned = unixTime(s.baseExpiration(r.hung))
		}
		if time.Now().After(planned.Add(-time.Second)) {
			return
		}
		info, err := s.job(big)
		if err != nil {
			t.Fatal(err)
		}
		if info.TRun > 0 {
			return
		}
		r.planSamples++
		if e := info.estimate(); e == nil || e.Sub(planned).Abs() > time.Second {
			r.planBad++
		}
	}
}
