package e2e

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// fluxNodes is the size of the tests' Flux instance: fake0..fake3.
const fluxNodes = 4

// fluxGrace is the harness's G (its agents' and aggregators' grace).
const fluxGrace = 3 * time.Second

// gracewatchFlux is a Flux instance of fluxNodes fake nodes whose prolog and
// housekeeping are the shipped flux-prolog.sh and flux-epilog.sh, one agent
// per rank named for its fake host, and an aggregator running the shipped
// Flux actuators (actuator-flux.toml, flux-actuator.sh).
type gracewatchFlux struct {
	s      *fluxSite
	c      *cluster
	agg    *aggregator
	agents map[string]*agent
}

func startGracewatchFlux(t *testing.T) *gracewatchFlux {
	t.Helper()
	return startGracewatchFluxGrace(t, fluxGrace)
}

// startGracewatchFluxGrace is startGracewatchFlux with the agents' and the
// aggregator's G.
func startGracewatchFluxGrace(t *testing.T, grace time.Duration) *gracewatchFlux {
	t.Helper()
	return startGracewatchFluxPlan(t, grace, 0)
}

// startGracewatchFluxPlan is startGracewatchFluxGrace with the gracewatch
// jobtap plugin's G (0: the plugin is not loaded).
func startGracewatchFluxPlan(t *testing.T, grace, planGrace time.Duration) *gracewatchFlux {
	t.Helper()
	requireFlux(t)
	c := newCluster(t)
	c.grace = grace.String()
	// The shipped expiration command: the agents ask Flux for a job's E
	// when it ran past the one they were told.
	script, err := filepath.Abs(filepath.Join("..", "packaging", "examples", "nodeagent", "flux-expiration.sh"))
	if err != nil {
		t.Fatal(err)
	}
	c.teardown = fmt.Sprintf("expiration_command = [%q, \"{job}\"]", script)
	s := startFlux(t, fluxConfig{Size: fluxNodes, Agents: c.dir, PlanGrace: planGrace})
	// The aggregator's actuators run flux of this instance.
	t.Setenv("FLUX_URI", s.uri)
	t.Setenv("PATH", filepath.Join(s.prefix, "bin")+":"+os.Getenv("PATH"))
	c.aggConf = fluxActuators(t, s.dir, "")
	g := &gracewatchFlux{s: s, c: c, agents: map[string]*agent{}}
	g.agg = c.addAggregator("agg-1")
	for i := 0; i < fluxNodes; i++ {
		host := fmt.Sprintf("fake%d", i)
		g.agents[host] = c.addAgent(host)
	}
	for host := range g.agents {
		g.agg.waitNode(t, host, "up", 15*time.Second, func(n node) bool { return n.State == "up" })
	}
	return g
}

// TestFlux runs a real Flux instance of four fake nodes (flux-core and
// Fluxion with queue-policy easy) whose prolog and housekeeping are
// packaging/examples/nodeagent/flux-prolog.sh and flux-epilog.sh, one agent
// per rank, and an aggregator whose actuators are
// packaging/examples/aggregator/actuator-flux.toml, in order: a hung
// housekeeping on one node of four, the resume, an administrator's drains,
// a housekeeping within grace, a job the prolog missed, the f58 id of a
// job-manager epilog, an agent restart during a hung housekeeping, and a
// node name Flux does not know.
func TestFlux(t *testing.T) {
	g := startGracewatchFlux(t)
	s, c, agg := g.s, g.c, g.agg

	ok := t.Run("hung housekeeping on one node of four: drained in Flux at D = E + G, the others keep running", func(t *testing.T) {
		hang := startHangfs(t, s.path("fuse"))
		w := agg.watch(t)
		a := g.agents["fake0"]
		r := fluxHung(t, s, hang, true, 30*time.Second)

		// The prolog registered the job under its decimal id with R's E;
		// the job ended at its time limit: D = E + G.
		j := jobDeadline(t, a, r.hung.dec)
		if j.Expiration == nil || !j.Expiration.Equal(r.e) {
			t.Fatalf("the agent has E = %v for job %s (%s), R says %v: not registered by the prolog", j.Expiration, r.hung.dec, r.hung.f58, r.e)
		}
		r.d = *j.Deadline
		// The prolog named the job's owner (FLUX_JOB_USERID, resolved).
		owner := jobOwner(t)
		if j.User != owner {
			t.Errorf("the agent has user %q for job %s, want %q from the shipped prolog", j.User, r.hung.dec, owner)
		}
		t.Logf("with gracewatch (G=%v): %s", fluxGrace, r)
		if !r.d.Equal(r.e.Add(fluxGrace)) {
			t.Fatalf("D = %v, want E + G = %v", r.d, r.e.Add(fluxGrace))
		}
		// Until D the aggregator served teardown with free_at = D, then down.
		var sawTeardown bool
		for n, ev := w.nextFor(t, "fake0", 10*time.Second); ; n, ev = w.nextFor(t, "fake0", 10*time.Second) {
			if !sawTeardown && n.State == "up" {
				continue // the snapshot, and the time before the job ended
			}
			if n.State == "down" {
				if ev.At.Before(r.d) {
					t.Fatalf("the aggregator served fake0 down at %v, before D %v", ev.At, r.d)
				}
				break
			}
			if n.State != "teardown" || n.FreeAt == nil || n.FreeAt.UnixMilli() != r.d.UnixMilli() {
				t.Fatalf("before D the aggregator served fake0 %+v, want teardown with free_at = D = %v", n, r.d)
			}
			sawTeardown = true
		}
		if !sawTeardown {
			t.Fatal("the aggregator never served fake0 teardown")
		}

		if r.drained.IsZero() {
			t.Fatalf("fake0 not drained in Flux within 30 s of E")
		}
		late := r.drained.Sub(r.d)
		t.Logf("Flux drained fake0 %v after D", late.Round(time.Millisecond))
		if late < 0 || late > 2*time.Second {
			t.Errorf("Flux drained fake0 %v after D, want within 2 s after D", late)
		}
		cat := pidIn(t, a, r.hung.dec, "cat")
		want := fmt.Sprintf("gracewatch: job %s teardown exceeded grace %v: ", r.hung.dec, fluxGrace)
		own, cause := ownReason(t, r.reason)
		if !strings.HasPrefix(cause, "fuse.hangfs ") {
			t.Errorf("Flux's drain reason %q does not name the incident of the hung mount (fuse.hangfs ...)", r.reason)
		}
		if !strings.HasPrefix(own, want) || !strings.Contains(r.reason, fmt.Sprintf("pid %d cat", cat)) {
			t.Fatalf("Flux's drain reason %q, want %q... naming pid %d cat (the hung reader)", r.reason, want, cat)
		}
		// The agent's report names the user; the aggregator serves it.
		checkServedUser(t, c, agg, "fake0", r.hung.dec, owner)
		state, reason := s.waitNode("fake0", "drained", 5*time.Second, func(st, _ string) bool { return drainedState(st) })
		if reason != r.reason || state != "draining" {
			t.Errorf("flux resource status: fake0 %q %q, want draining (housekeeping still runs) with %q", state, reason, r.reason)
		}
		if !r.othersRunning {
			t.Errorf("the jobs on fake1..fake3 did not all run when fake0 was drained")
		}

		// Fluxion (easy) planned the waiting job at the hung job's E; once
		// fake0 is drained it plans and starts it on another node.
		// (Checked only if the test sampled it before E: the submissions
		// may take that long on a loaded machine.)
		if v, at := r.firstEstimate(); at.Before(r.e) && math.Abs(v-float64(r.e.UnixNano())/1e9) > 1 {
			t.Errorf("the waiting job's first t_estimate is %v (%v), want the hung job's E %v", v, r.estimates, r.e)
		}
		if v := r.lastEstimate(); math.Abs(v-float64(r.othersE.UnixNano())/1e9) > 1 {
			t.Errorf("the waiting job's last t_estimate is %v (%v), want the other nodes' E %v", v, r.estimates, r.othersE)
		}
		if r.started.IsZero() || r.startedOn == "fake0" || r.started.Before(r.drained) {
			t.Fatalf("the waiting job started at %v on %q, want after the drain (%v) on another node", r.started, r.startedOn, r.drained)
		}

		// The FUSE server ends: the reader gets an error, the housekeeping
		// fails and ends; Flux keeps the node drained with gracewatch's
		// reason.
		if err := hang.stop(); err != nil {
			t.Fatal(err)
		}
		_, reason = s.waitNode("fake0", "drained", 20*time.Second, func(st, _ string) bool { return st == "drained" })
		if reason != r.reason {
			t.Fatalf("after the housekeeping ended Flux's reason is %q, was %q", reason, r.reason)
		}
		// The released teardown is in the aggregator's history: the grace
		// advisor lists the prolog's user among those whose teardowns ran
		// long.
		checkGraceTopUser(t, c, agg, "1s", owner)
	})
	if !ok {
		return
	}

	ok = t.Run("resume through the aggregator undrains the node in Flux", func(t *testing.T) {
		ups := actuatorRuns(agg, "up")
		code, body := agg.post(t, "/v1/nodes/fake0/resume", c.token, `{"reason": "FUSE server restarted"}`)
		if code != 200 {
			t.Fatalf("POST /v1/nodes/fake0/resume: %d %s", code, body)
		}
		agg.waitNode(t, "fake0", "up", 10*time.Second, func(n node) bool { return n.State == "up" })
		s.waitNode("fake0", "undrained", 15*time.Second, func(st, _ string) bool { return st == "avail" })
		waitActuatorRuns(t, agg, "up", ups+1, 5*time.Second)
	})
	if !ok {
		return
	}

	ok = t.Run("an administrator's flux resource drain is never undone by gracewatch", func(t *testing.T) {
		const admin = "admin: bad DIMM"
		adminDrained := func(st, why string) bool { return drainedState(st) && why == admin }
		s.must("resource", "drain", "fake1", admin)
		s.waitNode("fake1", "drained by the admin", 5*time.Second, adminDrained)

		// A whole gracewatch down -> up cycle with the admin's drain in
		// place: the drain leaves the admin's reason, the undrain does not
		// undrain.
		downs, ups := actuatorRuns(agg, "down"), actuatorRuns(agg, "up")
		aggregatorCLI(t, c, agg, "drain", "fake1", "--reason", "maintenance window")
		agg.waitNode(t, "fake1", "down", 10*time.Second, func(n node) bool { return n.State == "down" })
		waitActuatorRuns(t, agg, "down", downs+1, 10*time.Second)
		if st, why, err := s.node("fake1"); err != nil || !adminDrained(st, why) {
			t.Fatalf("after gracewatch's down Flux has %q %q (%v), want the admin's drain", st, why, err)
		}
		aggregatorCLI(t, c, agg, "resume", "fake1", "--reason", "maintenance done")
		agg.waitNode(t, "fake1", "up", 10*time.Second, func(n node) bool { return n.State == "up" })
		waitActuatorRuns(t, agg, "up", ups+1, 10*time.Second)
		if st, why, err := s.node("fake1"); err != nil || !adminDrained(st, why) {
			t.Fatalf("after gracewatch's resume Flux has %q %q (%v), want the admin's drain", st, why, err)
		}

		// The admin drains it again (--force) after gracewatch did: the
		// admin's reason survives gracewatch's resume.
		s.must("resource", "undrain", "fake1")
		aggregatorCLI(t, c, agg, "drain", "fake1", "--reason", "suspect node")
		_, why := s.waitNode("fake1", "drained by gracewatch", 10*time.Second, func(st, why string) bool {
			return drainedState(st) && strings.HasPrefix(why, "gracewatch: ")
		})
		t.Logf("gracewatch's drain: %q", why)
		s.must("resource", "drain", "--force", "fake1", admin)
		s.waitNode("fake1", "drained by the admin", 5*time.Second, adminDrained)
		ups = actuatorRuns(agg, "up")
		aggregatorCLI(t, c, agg, "resume", "fake1", "--reason", "node checked")
		waitActuatorRuns(t, agg, "up", ups+1, 10*time.Second)
		if st, why, err := s.node("fake1"); err != nil || !adminDrained(st, why) {
			t.Fatalf("after gracewatch's resume Flux has %q %q (%v), want the admin's drain", st, why, err)
		}
		s.must("resource", "undrain", "fake1")
	})
	if !ok {
		return
	}

	ok = t.Run("housekeeping within grace: no drain, no signal, the node free for the next job", func(t *testing.T) {
		a := g.agents["fake2"]
		s.housekeeping("fake2", "sleep 1")
		defer s.housekeeping("fake2", "")
		w := agg.watch(t)
		drains := len(s.drains(2))
		first := s.submit("-N1", "--requires=rank:2", "-t", "30s", "true")
		// No time limit: Fluxion's R says 9223372036, the prolog registers
		// the job without an expiration.
		next := s.submit("-N1", "--requires=rank:2", "true")
		hk := s.hkStart(first, "fake2", 20*time.Second)
		td, _ := w.next(t, "fake2", "teardown", 10*time.Second)
		j := jobDeadline(t, a, first.dec)
		if td.FreeAt == nil || td.FreeAt.UnixMilli() != j.Deadline.UnixMilli() {
			t.Fatalf("the aggregator served free_at %v, the agent's D is %v", td.FreeAt, j.Deadline)
		}
		w.next(t, "fake2", "up", 10*time.Second)
		info := s.waitJob(next, "started", 10*time.Second, func(i jobInfo) bool { return i.TRun > 0 })
		started := unixTime(info.TRun)
		t.Logf("housekeeping of %s started %s, D %s, the next job started %v after the housekeeping's start on %s",
			first.f58, hk.Format(time.RFC3339Nano), j.Deadline.Format(time.RFC3339Nano), started.Sub(hk).Round(time.Millisecond), info.Nodelist)
		if info.Nodelist != "fake2" || started.Sub(hk) < time.Second || !started.Before(*j.Deadline) {
			t.Errorf("the next job started %v after the housekeeping's start (which sleeps 1 s) on %q, want on fake2 before D %v",
				started.Sub(hk), info.Nodelist, j.Deadline)
		}
		if n := len(s.drains(2)); n != drains {
			t.Errorf("Flux has %d drain events of fake2, had %d", n, drains)
		}
		if tm := agentLogTime(a, "escalation", first.dec, ""); !tm.IsZero() {
			t.Errorf("the agent escalated job %s at %v", first.dec, tm)
		}
		s.waitJob(next, "inactive", 20*time.Second, func(i jobInfo) bool { return i.State == "INACTIVE" })
		if tm := agentLogTime(a, "job registered", next.dec, ""); tm.IsZero() {
			t.Errorf("the prolog did not register job %s (no time limit)", next.dec)
		}
		j = jobDeadline(t, a, next.dec)
		if j.Expiration != nil {
			t.Errorf("job %s without a time limit registered with E = %v, want none", next.dec, j.Expiration)
		}
	})
	if !ok {
		return
	}

	ok = t.Run("a job the prolog missed: its housekeeping registers it", func(t *testing.T) {
		a := g.agents["fake3"]
		skip := s.path("skip-prolog-fake3")
		if err := os.WriteFile(skip, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(skip)
		j := s.submit("-N1", "--requires=rank:3", "-t", "30s", "true")
		s.waitJob(j, "inactive", 20*time.Second, func(i jobInfo) bool { return i.State == "INACTIVE" })
		s.hkStart(j, "fake3", 10*time.Second)
		s.waitNode("fake3", "free", 10*time.Second, func(st, _ string) bool { return st == "avail" })
		if tm := agentLogTime(a, "job registered by its epilogue", j.dec, ""); tm.IsZero() {
			t.Fatalf("the agent did not register job %s at its housekeeping", j.dec)
		}
		if tm := agentLogTime(a, "job registered", j.dec, ""); !tm.IsZero() {
			t.Fatalf("job %s was registered by the prolog at %v, which was told to skip it", j.dec, tm)
		}
		// The housekeeping's registration names the owner too.
		checkJobUser(t, a, j.dec, jobOwner(t))
		if n := len(s.drains(3)); n != 0 {
			t.Errorf("Flux has %d drain events of fake3", n)
		}
	})
	if !ok {
		return
	}

	ok = t.Run("the job-manager epilog's f58 id names the decimal job", func(t *testing.T) {
		// flux-epilog.sh as a [job-manager.epilog] would run it: FLUX_JOB_ID
		// in f58 form. The agent must know the job by its decimal id, the
		// one the prolog and housekeeping use.
		const dec = "1234567890123"
		f58 := strings.TrimSpace(s.must("job", "id", "--to=f58", dec))
		a := g.agents["fake0"]
		cmd := exec.Command(s.path("flux-epilog.sh"))
		cmd.Env = append(append([]string(nil), s.env...), "FLUX_JOB_ID="+f58, "GRACEWATCH_SOCKET="+a.socket)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("flux-epilog.sh with FLUX_JOB_ID=%s: %v\n%s", f58, err, out)
		}
		if tm := agentLogTime(a, "job registered by its epilogue", dec, ""); tm.IsZero() {
			t.Fatalf("the agent did not supervise job %s (FLUX_JOB_ID=%s) under its decimal id\n%s", dec, f58, a.logs)
		}
	})
	if !ok {
		return
	}

	ok = t.Run("agent restart during a hung housekeeping: the deadline holds, Flux drains once", func(t *testing.T) {
		a := g.agents["fake3"]
		hang := startHangfs(t, s.path("fuse3"))
		s.housekeeping("fake3", "cat "+hang.file()+" >/dev/null")
		defer s.housekeeping("fake3", "")
		j := s.submit("-N1", "--requires=rank:3", "-t", "2s", "sleep", "300")
		s.waitJob(j, "running", 20*time.Second, func(i jobInfo) bool { return i.State == "RUN" })
		e := unixTime(s.expiration(j))
		hang.waitRead(time.Until(e) + 20*time.Second)
		d := *jobDeadline(t, a, j.dec).Deadline
		if !d.Equal(e.Add(fluxGrace)) {
			t.Fatalf("D = %v, want E + G = %v", d, e.Add(fluxGrace))
		}
		a.crash()
		a.start()
		a.waitAPI()
		if time.Now().After(d) {
			t.Fatalf("the agent was back only %v after D: the test proves nothing", time.Since(d))
		}
		if d2 := *jobDeadline(t, a, j.dec).Deadline; !d2.Equal(d) {
			t.Fatalf("after the restart D = %v, was %v", d2, d)
		}
		_, reason := s.waitNode("fake3", "drained", time.Until(d)+10*time.Second, func(st, _ string) bool { return drainedState(st) })
		evs := s.drains(3)
		if len(evs) != 1 {
			t.Fatalf("Flux drain events of fake3: %v, want one", evs)
		}
		late := evs[0].At.Sub(d)
		t.Logf("after the restart Flux drained fake3 %v after D: %q", late.Round(time.Millisecond), reason)
		if late < 0 || late > 2*time.Second {
			t.Errorf("Flux drained fake3 %v after D, want within 2 s after D", late)
		}
		if own, _ := ownReason(t, reason); !strings.HasPrefix(own, "gracewatch: job "+j.dec+" teardown exceeded grace") {
			t.Errorf("Flux's reason %q is not gracewatch's for job %s", reason, j.dec)
		}
		// Still one drain once the aggregator has taken everything the
		// restarted agent sent (a round of its loop after the agent's
		// state was served) and every actuation it began has ended.
		downs := actuatorRuns(agg, "down")
		agg.loopRound(t, c.token)
		testutil.Eventually(t, 60*time.Second, "the aggregator's actuators idle", func() bool {
			return linesSince(agg.proc, 0, `"msg":"actuating"`) == linesSince(agg.proc, 0, `"msg":"actuated: nothing more to run for the node"`)
		})
		if n := len(s.drains(3)); n != 1 || actuatorRuns(agg, "down") != downs {
			t.Fatalf("then Flux has %d drain events of fake3 and the aggregator ran %d more drains", n, actuatorRuns(agg, "down")-downs)
		}
		if err := hang.stop(); err != nil {
			t.Fatal(err)
		}
		aggregatorCLI(t, c, agg, "resume", "fake3", "--reason", "FUSE server restarted")
		s.waitNode("fake3", "undrained", 15*time.Second, func(st, _ string) bool { return st == "avail" })
	})
	if !ok {
		return
	}

	t.Run("a node Flux does not know: logged, retried with back-off, the view kept", func(t *testing.T) {
		c.addAgent("fake9")
		agg.waitNode(t, "fake9", "up", 15*time.Second, func(n node) bool { return n.State == "up" })
		checkActuatorRetries(t, c, agg, "fake9", "invalid hosts: fake9")
	})
}
