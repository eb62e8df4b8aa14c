package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/internal/testutil/benchenv"
)

// The cluster's grace G: the harness's agents and aggregators use 3 s (its
// configuration has no knob for it), which keeps the test short.
const slurmGrace = 3 * time.Second

// gracewatchSlurm is a one-node Slurm whose Epilog= is the shipped wrapper
// (the real epilogue hangs on a FUSE file), with an aggregator running the
// shipped Slurm actuators and the node's agent named as Slurm's node.
type gracewatchSlurm struct {
	s   *slurmSite
	c   *cluster
	agg *aggregator
	a   *agent
}

// newGracewatchSlurm starts a one-node Slurm and a gracewatch cluster of one
// aggregator (with Slurm's actuators) and the node's agent, configured by
// setup before they start, and returns once the aggregator serves the node
// up.
func newGracewatchSlurm(t *testing.T, setup func(*cluster)) *gracewatchSlurm {
	t.Helper()
	requireSlurm(t)
	s := newSlurmSite(t)
	// The aggregator's actuators run scontrol, which needs SLURM_CONF.
	t.Setenv("SLURM_CONF", s.conf)
	c := newCluster(t)
	c.aggConf = s.slurmActuators()
	setup(c)
	g := &gracewatchSlurm{s: s, c: c, agg: c.addAggregator("agg-1")}
	g.a = c.addAgent(s.host)
	g.agg.waitNode(t, s.host, "up", 15*time.Second, func(n node) bool { return n.State == "up" })
	return g
}

func startGracewatchSlurm(t *testing.T, cfg slurmConfig) *gracewatchSlurm {
	t.Helper()
	// SIGKILL 2 s after D, survivors classified 2 s later: the reason goes
	// from "still running" to "unkillable" while the node is drained.
	g := newGracewatchSlurm(t, func(c *cluster) { c.killWait, c.unkillableAfter = "2s", "2s" })
	s := g.s
	cfg.Epilog = s.writeGracewatchEpilog(g.a, s.writeRealEpilog(s.path("fuse/hang")))
	s.start(cfg)
	return g
}

// TestSlurm runs a real one-node Slurm (munged, slurmctld, slurmd on
// loopback) whose Epilog= runs the real epilogue through `nodeagent epilog`
// (packaging/examples/nodeagent/slurm-epilog.sh), and an aggregator whose
// actuators are packaging/examples/aggregator/actuator-slurm.toml, in order:
// a job whose epilogue hangs, the resume, and an administrator's drains.
func TestSlurm(t *testing.T) {
	g := startGracewatchSlurm(t, slurmConfig{})
	s, c, agg, a := g.s, g.c, g.agg, g.a
	host := s.host

	ok := t.Run("hung epilogue: Slurm drains the node with the diagnosis within 2 s of D", func(t *testing.T) {
		hang := startHangfs(t, s.path("fuse"))
		w := agg.watch(t)
		job := s.submit("--wrap", "true")
		hang.waitRead(30 * time.Second)
		td, _ := w.next(t, host, "teardown", 10*time.Second)
		j := jobDeadline(t, a, job)
		d := *j.Deadline
		if td.FreeAt == nil || td.FreeAt.UnixMilli() != d.UnixMilli() {
			t.Fatalf("the aggregator served free_at %v during the teardown, the agent's D is %v", td.FreeAt, d)
		}
		state, reason, _ := s.node()
		t.Logf("during the teardown: Slurm %q reason %q; gracewatch teardown, free_at = D = %s", state, reason, d.Format(time.RFC3339Nano))
		cat := pidIn(t, a, job, "cat")

		state, reason = s.waitNode("drained", time.Until(d)+10*time.Second, func(state, _ string) bool {
			return strings.HasPrefix(state, "drain")
		})
		late := time.Since(d)
		t.Logf("Slurm %q %v after D: %q", state, late.Round(time.Millisecond), reason)
		if late > 2*time.Second {
			t.Errorf("Slurm drained the node %v after D, want within 2 s", late)
		}
		want := fmt.Sprintf("gracewatch: job %s teardown exceeded grace %v: ", job, slurmGrace)
		own, cause := ownReason(t, reason)
		if !strings.HasPrefix(cause, "fuse.hangfs ") {
			t.Errorf("Slurm's reason %q does not name the incident of the hung mount (fuse.hangfs ...)", reason)
		}
		if !strings.HasPrefix(own, want) || !strings.Contains(reason, fmt.Sprintf("pid %d cat", cat)) {
			t.Fatalf("Slurm's reason %q, want %q... naming pid %d cat (the hung reader)", reason, want, cat)
		}
		if state != "draining" {
			t.Errorf("state %q while the epilogue still hangs, want draining (the job is still completing)", state)
		}

		// The diagnosis follows the hang, and Slurm's reason follows the
		// diagnosis (on="reason", at most every 5 s, without a second
		// drain): SIGKILL at D + 2 s leaves the reader unkillable.
		drainedAt := time.Now()
		_, reason = s.waitNode("the reason saying unkillable", 15*time.Second, func(_, reason string) bool {
			return strings.Contains(reason, fmt.Sprintf("1 unkillable (pid %d cat, D in request_wait_answer", cat))
		})
		t.Logf("Slurm's reason followed the classification %v after the drain: %q", time.Since(drainedAt).Round(time.Millisecond), reason)
		if own, _ := ownReason(t, reason); !strings.HasPrefix(own, want) {
			t.Fatalf("updated reason %q lost gracewatch's prefix %q", reason, want)
		}

		// The FUSE server ends: the reader gets an error, the epilogue
		// fails, slurmd reports "Epilog error". The job leaves; the node
		// stays drained, and its reason says the hang is gone and what
		// clears it.
		if err := hang.stop(); err != nil {
			t.Fatal(err)
		}
		goneAt := time.Now()
		state, reason2 := s.waitNode("drained, the reason saying gone", 20*time.Second, func(state, reason string) bool {
			return state == "drained" && strings.Contains(reason, "; gone since ") && strings.HasSuffix(reason, ", resume to clear")
		})
		t.Logf("Slurm's reason followed the hang's end %v after it: %q", time.Since(goneAt).Round(time.Millisecond), reason2)
		if !strings.HasPrefix(reason2, "gracewatch: ") {
			t.Fatalf("after the epilogue ended Slurm's reason is %q", reason2)
		}
		if !s.jobGone(job) {
			t.Fatalf("job %s still listed by squeue with the node %s", job, state)
		}
	})
	if !ok {
		return
	}

	ok = t.Run("resume through the aggregator returns the node to IDLE", func(t *testing.T) {
		ups := actuatorRuns(agg, "up")
		aggregatorCLI(t, c, agg, "resume", host, "--reason", "FUSE server restarted")
		agg.waitNode(t, host, "up", 10*time.Second, func(n node) bool { return n.State == "up" })
		s.waitNode("idle", 15*time.Second, func(state, reason string) bool { return state == "idle" && reason == "" })
		waitActuatorRuns(t, agg, "up", ups+1, 5*time.Second)
	})
	if !ok {
		return
	}

	const admin = "admin: bad DIMM"
	adminDrained := func(state, reason string) bool { return strings.HasPrefix(state, "drain") && reason == admin }

	ok = t.Run("an administrator's drain is never undone by gracewatch", func(t *testing.T) {
		downs, ups := actuatorRuns(agg, "down"), actuatorRuns(agg, "up")
		s.must("scontrol", "update", "NodeName="+host, "State=DRAIN", "Reason="+admin)
		s.waitNode("drained by the admin", 15*time.Second, adminDrained)
		// gracewatch is up and stays up: nothing to actuate. Shown below
		// by a later event: the aggregator runs a node's actuators in
		// order, so a run caused by the admin's drain would come before
		// the down and up runs of the cycle below, and be counted there.

		// A whole gracewatch down -> up cycle with the admin's drain in
		// place: the down actuator leaves the admin's reason, the up one
		// does not resume.
		aggregatorCLI(t, c, agg, "drain", host, "--reason", "maintenance window")
		agg.waitNode(t, host, "down", 10*time.Second, func(n node) bool { return n.State == "down" })
		waitActuatorRuns(t, agg, "down", downs+1, 10*time.Second)
		if state, reason, err := s.node(); err != nil || !adminDrained(state, reason) {
			t.Fatalf("after gracewatch's down Slurm has %q %q (%v), want the admin's drain", state, reason, err)
		}
		aggregatorCLI(t, c, agg, "resume", host, "--reason", "maintenance done")
		agg.waitNode(t, host, "up", 10*time.Second, func(n node) bool { return n.State == "up" })
		// Logged once the command has exited: Slurm's state is final.
		waitActuatorRuns(t, agg, "up", ups+1, 10*time.Second)
		if state, reason, err := s.node(); err != nil || !adminDrained(state, reason) {
			t.Fatalf("after gracewatch's resume Slurm has %q %q (%v), want the admin's drain", state, reason, err)
		}
		if d, u := actuatorRuns(agg, "down")-downs, actuatorRuns(agg, "up")-ups; d != 1 || u != 1 {
			t.Errorf("since the admin's drain the aggregator ran %d down and %d up actuators, want one each (the cycle's)", d, u)
		}
	})
	if !ok {
		return
	}

	t.Run("an administrator's drain after gracewatch's survives gracewatch's resume", func(t *testing.T) {
		s.must("scontrol", "update", "NodeName="+host, "State=RESUME")
		s.waitNode("idle", 10*time.Second, func(state, reason string) bool { return state == "idle" })
		aggregatorCLI(t, c, agg, "drain", host, "--reason", "suspect node")
		_, reason := s.waitNode("drained by gracewatch", 10*time.Second, func(state, reason string) bool {
			return strings.HasPrefix(state, "drain") && strings.HasPrefix(reason, "gracewatch: ")
		})
		t.Logf("gracewatch's drain: %q", reason)
		// The admin drains it again, for a reason of their own.
		s.must("scontrol", "update", "NodeName="+host, "State=DRAIN", "Reason="+admin)
		s.waitNode("drained by the admin", 5*time.Second, adminDrained)
		ups := actuatorRuns(agg, "up")
		aggregatorCLI(t, c, agg, "resume", host, "--reason", "node checked")
		// Logged once the command has exited: Slurm's state is final.
		waitActuatorRuns(t, agg, "up", ups+1, 10*time.Second)
		if state, reason, err := s.node(); err != nil || !adminDrained(state, reason) {
			t.Fatalf("after gracewatch's resume Slurm has %q %q (%v), want the admin's drain", state, reason, err)
		}
	})
}

// hungRun is one hung epilogue as Slurm (and gracewatch) saw it.
type hungRun struct {
	epilogStart time.Time // the real epilogue's first line: the job has ended
	deadline    time.Time // gracewatch's D (zero without gracewatch)
	freeAt      string    // the aggregator's free_at during the teardown, relative to the epilogue's start
	drained     time.Time // Slurm first shows drain (zero: not within the observation)
	state       string    // Slurm's state then, or at the end of the observation
	reason      string
	states      []string      // Slurm's states seen, in order, without repeats
	nextStart   []string      // squeue --start of the waiting exclusive job, relative to the sample's time, without repeats
	afterDrain  string        // the waiting job's expected start and reason 1.5 s after the drain
	leftover    string        // the hung readers still alive then (pid, comm, state)
	latched     time.Time     // the agent's SIGTERM log line: it comes right after the latch
	aggDown     time.Time     // the aggregator's /v1/watch served the node down
	actuator    time.Duration // how long the aggregator's on=down actuator (slurm-actuator.sh drain) ran
}

// observeHung samples Slurm every 100 ms (the waiting job's expected start
// every 500 ms) from the epilogue's start until the node shows drain or
// until limit has passed.
func observeHung(t *testing.T, s *slurmSite, r *hungRun, waiting string, limit time.Duration) {
	t.Helper()
	end := time.Now().Add(limit)
	var lastStart time.Time
	for time.Now().Before(end) {
		state, reason, err := s.node()
		now := time.Now()
		if err == nil {
			r.state, r.reason = state, reason
			r.states = appendNew(r.states, state)
			if strings.HasPrefix(state, "drain") {
				r.drained = now
				// Not a wait: the waiting job's plan is sampled 1.5 s
				// after the drain (more than one backfill pass, bf_interval
				// 1 s), the figure BENCHMARKS.md reports.
				time.Sleep(1500 * time.Millisecond)
				out, _ := s.run("squeue", "-h", "-j", waiting, "-o", "%S|%r")
				start, why, _ := strings.Cut(strings.TrimSpace(out), "|")
				r.afterDrain = relStart(start, time.Now()) + " (" + why + ")"
				r.leftover = hungReaders()
				return
			}
		}
		if now.Sub(lastStart) >= 500*time.Millisecond {
			lastStart = now
			r.nextStart = appendNew(r.nextStart, relStart(s.expectedStart(waiting), now))
		}
		time.Sleep(100 * time.Millisecond) // not a wait: the observation's sampling interval

	}
	r.leftover = hungReaders()
}

func appendNew(xs []string, x string) []string {
	if len(xs) > 0 && xs[len(xs)-1] == x {
		return xs
	}
	return append(xs, x)
}

// relStart says when the scheduler expects the waiting job to start,
// relative to now, to the second ("now" when within a second).
func relStart(start string, now time.Time) string {
	at, err := time.ParseInLocation("2006-01-02T15:04:05", start, time.Local)
	if err != nil {
		return start
	}
	d := at.Sub(now.Truncate(time.Second)).Round(time.Second)
	if d >= -time.Second && d <= time.Second {
		return "now"
	}
	return fmt.Sprintf("now%+ds", int(d.Seconds()))
}

// hungReaders lists the processes blocked in a FUSE read (wchan
// request_wait_answer) on the whole host, as "pid N comm state"; "none" if
// there are none. It reads only stat and wchan, never cmdline (which can
// block on them).
func hungReaders() string {
	var out []string
	pids, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range pids {
		w, err := os.ReadFile(p + "/wchan")
		if err != nil || string(w) != "request_wait_answer" {
			continue
		}
		// "pid (comm) state ..."
		stat, _ := os.ReadFile(p + "/stat")
		f := string(stat)
		i, j := strings.IndexByte(f, '('), strings.LastIndexByte(f, ')')
		if i < 0 || j < i || len(f) < j+3 {
			continue
		}
		out = append(out, fmt.Sprintf("pid %s %s %s", strings.TrimSpace(f[:i]), f[i+1:j], f[j+2:j+3]))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// lastActuatorDuration is the duration the aggregator logged for its last
// successful on=on actuator run.
func lastActuatorDuration(g *aggregator, on string) time.Duration {
	var d time.Duration
	for _, line := range strings.Split(g.logs.String(), "\n") {
		var l struct {
			Msg, Transition string
			Duration        time.Duration
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "actuator ran" && l.Transition == on {
			d = l.Duration
		}
	}
	return d
}

// agentLogTime is the time of the agent's log line msg about job (with
// signal, if not empty).
func agentLogTime(a *agent, msg, job, signal string) time.Time {
	for _, line := range strings.Split(a.logs.String(), "\n") {
		var l struct {
			Time             time.Time
			Msg, Job, Signal string
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == msg && l.Job == job && (signal == "" || l.Signal == signal) {
			return l.Time
		}
	}
	return time.Time{}
}

// TestSlurmCompare measures the same hung epilogue (a reader of a FUSE file
// that never answers) under Slurm alone, with PrologEpilogTimeout = G and
// with its default (wait forever), and under Slurm with gracewatch (grace
// G), for BENCHMARKS.md. It takes minutes: it runs only with
// GRACEWATCH_SLURM_COMPARE=1. GRACEWATCH_SLURM_RUNS (default 5) runs per
// timed case; GRACEWATCH_SLURM_OBSERVE (default 120s) bounds the
// observation of the default case.
func TestSlurmCompare(t *testing.T) {
	if os.Getenv("GRACEWATCH_SLURM_COMPARE") != "1" {
		t.Skip("set GRACEWATCH_SLURM_COMPARE=1 to measure Slurm alone against Slurm with gracewatch (several minutes)")
	}
	runs := benchenv.Int(t, "GRACEWATCH_SLURM_RUNS", 5)
	observe := benchenv.Duration(t, "GRACEWATCH_SLURM_OBSERVE", 120*time.Second)
	grace := int(slurmGrace / time.Second)
	// The backfill scheduler runs every second (default 30 s), so that its
	// expected start time of the waiting job shows within the short window.
	const bf = 1

	t.Run("slurm alone, PrologEpilogTimeout=G", func(t *testing.T) {
		requireSlurm(t)
		s := newSlurmSite(t)
		s.start(slurmConfig{Epilog: s.writeRealEpilog(s.path("fuse/hang")), PrologEpilogTimeout: grace, BackfillInterval: bf})
		var rs []hungRun
		for i := 0; i < runs; i++ {
			rs = append(rs, slurmAloneRun(t, s, 20*time.Second))
		}
		report(t, "Slurm alone, PrologEpilogTimeout="+strconv.Itoa(grace), rs)
		// Slurm's own timeout drains on time; what it cannot say is
		// what hung (gracewatch's reason below does).
		for i, r := range rs {
			if strings.Contains(r.reason, "request_wait_answer") {
				t.Errorf("run %d: Slurm alone named the hung wait itself (%q): the comparison has no contrast", i+1, r.reason)
			}
		}
	})

	t.Run("slurm alone, default", func(t *testing.T) {
		requireSlurm(t)
		s := newSlurmSite(t)
		s.start(slurmConfig{Epilog: s.writeRealEpilog(s.path("fuse/hang")), BackfillInterval: bf})
		r := slurmAloneRun(t, s, observe)
		report(t, fmt.Sprintf("Slurm alone, default (observed %v)", observe), []hungRun{r})
		notDrainedNearD(t, "Slurm alone, default", r.epilogStart.Add(slurmGrace), r.drained)
	})

	t.Run("slurm with gracewatch", func(t *testing.T) {
		g := startGracewatchSlurm(t, slurmConfig{BackfillInterval: bf})
		var rs []hungRun
		for i := 0; i < runs; i++ {
			rs = append(rs, gracewatchRun(t, g))
		}
		report(t, "Slurm with gracewatch, G="+slurmGrace.String(), rs)
		for i, r := range rs {
			what := fmt.Sprintf("Slurm with gracewatch, run %d", i+1)
			drainedNearD(t, what, r.deadline, r.drained)
			if !strings.HasPrefix(r.reason, "gracewatch: ") || !strings.Contains(r.reason, "request_wait_answer") {
				t.Errorf("%s: Slurm's reason %q does not name the hung FUSE wait", what, r.reason)
			}
			if !strings.Contains(r.freeAt, "epilogue start +") {
				t.Errorf("%s: the aggregator served no free_at during the teardown (%s)", what, r.freeAt)
			}
		}
	})
}

// slurmAloneRun runs one job whose epilogue hangs, with a second job
// (exclusive) waiting for the node, observes Slurm for at most limit, then
// releases the hang and returns the node to idle.
func slurmAloneRun(t *testing.T, s *slurmSite, limit time.Duration) hungRun {
	t.Helper()
	hang := startHangfs(t, s.path("fuse"))
	job := s.submit("--wrap", "true")
	hang.waitRead(30 * time.Second)
	r := hungRun{epilogStart: s.epilogStart(job, 5*time.Second)}
	waiting := s.submit("--exclusive", "--wrap", "true")
	observeHung(t, s, &r, waiting, time.Until(r.epilogStart.Add(limit)))
	cleanupRun(t, s, hang, job, waiting)
	// Drained by PrologEpilogTimeout, or, by default, by the epilogue that
	// failed once the hang ended.
	if state, _, _ := s.node(); strings.HasPrefix(state, "drain") {
		s.must("scontrol", "update", "NodeName="+s.host, "State=RESUME")
	}
	s.waitNode("idle", 15*time.Second, func(state, _ string) bool { return state == "idle" })
	return r
}

// gracewatchRun is slurmAloneRun with gracewatch: it also records D and the
// aggregator's free_at, and resumes through the aggregator.
func gracewatchRun(t *testing.T, g *gracewatchSlurm) hungRun {
	t.Helper()
	s := g.s
	hang := startHangfs(t, s.path("fuse"))
	w := g.agg.watch(t)
	job := s.submit("--wrap", "true")
	hang.waitRead(30 * time.Second)
	r := hungRun{epilogStart: s.epilogStart(job, 5*time.Second)}
	waiting := s.submit("--exclusive", "--wrap", "true")
	j := jobDeadline(t, g.a, job)
	r.deadline = *j.Deadline
	n := g.agg.waitNode(t, s.host, "teardown", 5*time.Second, func(n node) bool { return n.State != "up" })
	if n.FreeAt != nil {
		r.freeAt = fmt.Sprintf("%s (epilogue start + %.2f s)", n.State, n.FreeAt.Sub(r.epilogStart).Seconds())
	} else {
		r.freeAt = n.State + ", no free_at"
	}
	observeHung(t, s, &r, waiting, 20*time.Second)
	_, ev := w.next(t, s.host, "down", 5*time.Second)
	r.aggDown = ev.At
	r.actuator = lastActuatorDuration(g.agg, "down")
	r.latched = agentLogTime(g.a, "escalation", job, "SIGTERM")
	w.cancel()
	cleanupRun(t, s, hang, job, waiting)
	aggregatorCLI(t, g.c, g.agg, "resume", s.host, "--reason", "FUSE server restarted")
	if compareWithout(t, "drains") {
		// The actuators change nothing in Slurm: Slurm's own drain of
		// the node (the killed epilogue's "Epilog error") is undone here,
		// so that the run ends and its measurement is asserted.
		s.must("scontrol", "update", "NodeName="+s.host, "State=RESUME")
	}
	s.waitNode("idle", 15*time.Second, func(state, _ string) bool { return state == "idle" })
	return r
}

// cleanupRun ends the hang, cancels the waiting job and waits for the hung
// job to leave.
func cleanupRun(t *testing.T, s *slurmSite, hang *hangServer, job, waiting string) {
	t.Helper()
	s.must("scancel", waiting)
	if err := hang.stop(); err != nil {
		t.Fatal(err)
	}
	if !testutil.Poll(90*time.Second, func() bool { return s.jobGone(job) && s.jobGone(waiting) }) {
		t.Fatalf("jobs %s and %s still listed 90 s after the hang ended", job, waiting)
	}
}

// report logs one case's runs and its summary: median and range of the time
// from the epilogue's start (and from D) to the drain.
func report(t *testing.T, name string, rs []hungRun) {
	t.Helper()
	var fromEnd, fromD []float64
	for i, r := range rs {
		line := fmt.Sprintf("%s run %d: states %v", name, i+1, r.states)
		if !r.drained.IsZero() {
			e := r.drained.Sub(r.epilogStart).Seconds()
			fromEnd = append(fromEnd, e)
			line += fmt.Sprintf("; drained %.2f s after the epilogue started", e)
			if !r.deadline.IsZero() {
				d := r.drained.Sub(r.deadline).Seconds()
				fromD = append(fromD, d)
				line += fmt.Sprintf(" (%.2f s after D)", d)
			}
		} else {
			line += "; never drained"
		}
		line += fmt.Sprintf("; last state %q reason %q; waiting job's expected start %v", r.state, r.reason, r.nextStart)
		if r.afterDrain != "" {
			line += ", after the drain " + r.afterDrain
		}
		line += "; hung readers then: " + r.leftover
		if r.freeAt != "" {
			line += "; aggregator " + r.freeAt
		}
		if !r.aggDown.IsZero() {
			line += fmt.Sprintf("; agent latched %.2f s, aggregator down %.2f s after D, actuator ran %v",
				r.latched.Sub(r.deadline).Seconds(), r.aggDown.Sub(r.deadline).Seconds(), r.actuator)
		}
		t.Log(line)
	}
	if len(fromEnd) > 0 {
		t.Logf("SUMMARY %s: epilogue start to drain: %s", name, medianRange(fromEnd))
	}
	if len(fromD) > 0 {
		t.Logf("SUMMARY %s: D to drain: %s", name, medianRange(fromD))
	}
}

func medianRange(xs []float64) string {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return fmt.Sprintf("median %.2f s, range %.2f–%.2f s (n=%d)", m, s[0], s[len(s)-1], len(s))
}
