package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/internal/testutil"
)

// A job's own task hung at its time limit (issue 9): Slurm's proctrack/
// cgroup (v1) keeps the task in its job cgroup, the controller registers
// the job's E with gracewatch once (PrologSlurmctld through the
// aggregator), the node's Prolog adds the job's cgroup, and the agent
// latches the node at E + G without any end report.

// The grace of this test: longer than Slurm's kill path with KillWait 5 s
// (up to 30 s to slurmctld's time-limit check + 5 s: the task has SIGKILL
// pending at D), shorter than its UnkillableStepTimeout of 60 s after that
// (Slurm's "Kill task failed" comes later).
// aggReasonWait bounds the wait for an on=reason actuator run: the
// aggregator's ReasonEvery (5 s) plus an actuator run.
const aggReasonWait = 7 * time.Second

const (
	slurmJobGrace      = 45 * time.Second
	slurmJobKillWait   = 5
	slurmJobUnkillable = 60
)

// gracewatchSlurmJob is a one-node Slurm with gracewatch's Prolog,
// PrologSlurmctld and Epilog wiring (all shipped scripts), the job's tasks
// in v1 cgroups.
type gracewatchSlurmJob struct {
	*gracewatchSlurm
	prologLog string
}

func startGracewatchSlurmJob(t *testing.T) *gracewatchSlurmJob {
	t.Helper()
	g := newGracewatchSlurm(t, func(c *cluster) { c.grace = slurmJobGrace.String() })
	s := g.s
	real := s.path("epilog.true")
	if err := os.WriteFile(real, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	j := &gracewatchSlurmJob{gracewatchSlurm: g, prologLog: s.path("prolog-ctld.log")}
	cfg := slurmConfig{Cgroup: true, KillWait: slurmJobKillWait, UnkillableStepTimeout: slurmJobUnkillable,
		Epilog:          s.writeGracewatchEpilog(g.a, real),
		Prolog:          j.writeProlog(),
		PrologSlurmctld: j.writePrologSlurmctld(),
	}
	s.start(cfg)
	return j
}

// writePrologSlurmctld installs the shipped slurm-prolog-ctld.sh with the
// test's aggregator client, behind a script that gives it the aggregator's
// URL, the token and Slurm's configuration (slurmctld runs it with a bare
// environment), and keeps its output and environment for the test.
func (j *gracewatchSlurmJob) writePrologSlurmctld() string {
	s, t := j.s, j.s.t
	script := s.path("slurm-prolog-ctld.sh")
	text := replaceOnce(t, readExample(t, "aggregator/slurm-prolog-ctld.sh"), "/usr/sbin/aggregator", bins.aggregator)
	if err := os.WriteFile(script, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
	p := s.path("prolog-ctld.sh")
	wrapper := fmt.Sprintf(`#!/bin/sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin SLURM_CONF=%s
export GRACEWATCH_AGGREGATOR=%s GRACEWATCH_TOKEN_FILE=%s
env > %s.env
exec %s >>%s 2>&1
`, s.conf, j.agg.url, filepath.Join(j.c.dir, "token"), j.prologLog, script, j.prologLog)
	if err := os.WriteFile(p, []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeProlog installs the shipped slurm-prolog.sh, talking to the test
// agent's socket.
func (j *gracewatchSlurmJob) writeProlog() string {
	s, t := j.s, j.s.t
	script := s.path("slurm-prolog.sh")
	text := strings.ReplaceAll(readExample(t, "nodeagent/slurm-prolog.sh"), "/usr/sbin/nodeagent", bins.nodeagent)
	if err := os.WriteFile(script, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
	p := s.path("prolog.sh")
	wrapper := fmt.Sprintf("#!/bin/sh\nexport GRACEWATCH_SOCKET=%s\nexec %s >>%s 2>&1\n", j.a.socket, script, s.path("prolog.log"))
	if err := os.WriteFile(p, []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// slurmEndTime is the job's EndTime as Slurm has it (local time, seconds).
func (s *slurmSite) slurmEndTime(job string) time.Time {
	s.t.Helper()
	out := s.must("scontrol", "show", "job", "-o", job)
	for _, f := range strings.Fields(out) {
		if v, ok := strings.CutPrefix(f, "EndTime="); ok {
			e, err := time.ParseInLocation("2006-01-02T15:04:05", v, time.Local)
			if err != nil {
				s.t.Fatalf("EndTime %q: %v", v, err)
			}
			return e
		}
	}
	s.t.Fatalf("no EndTime in %q", out)
	return time.Time{}
}

// registeredJob waits until the agent has job with an expiration and a
// cgroup, and returns it.
func registeredJob(t *testing.T, j *gracewatchSlurmJob, job string, timeout time.Duration) api.Job {
	t.Helper()
	var found api.Job
	if !testutil.Poll(timeout, func() bool {
		for _, jb := range agentStatus(t, j.a).Jobs {
			if jb.ID == job && jb.Expiration != nil && jb.ForeignName != "" {
				found = jb
				return true
			}
		}
		return false
	}) {
		log, _ := os.ReadFile(j.prologLog)
		plog, _ := os.ReadFile(j.s.path("prolog.log"))
		t.Fatalf("job %s not registered with E and its cgroup within %v: %+v\nPrologSlurmctld:\n%s\nProlog:\n%s",
			job, timeout, agentStatus(t, j.a).Jobs, log, plog)
	}
	return found
}

// TestSlurmJobOverdue: a job with a time limit of 1 minute whose task reads
// the never-answering FUSE file and ignores SIGTERM. At E + G the node is
// DRAINED in Slurm with gracewatch's reason naming the task unkillable in
// request_wait_answer; until then the aggregator served it in teardown with
// free_at = E + G.
func TestSlurmJobOverdue(t *testing.T) {
	j := startGracewatchSlurmJob(t)
	s, a := j.s, j.a

	// config check asks this Slurm for its kill path: 0 min + up to 30 s +
	// KillWait 5 s, plus the margin, is the smallest safe grace; 45 s is
	// safe, 10 s is not.
	for _, c := range []struct {
		grace string
		warn  bool
	}{{slurmJobGrace.String(), false}, {"10s", true}} {
		cfg := filepath.Join(t.TempDir(), "nodeagent.toml")
		os.WriteFile(cfg, []byte(fmt.Sprintf("[teardown]\ngrace = %q\n", c.grace)), 0o600)
		cmd := exec.Command(bins.nodeagent, "config", "check", "--config", cfg)
		cmd.Env = append(os.Environ(), "SLURM_CONF="+s.conf)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("config check with grace %s: %v\n%s", c.grace, err, stderr.String())
		}
		if !strings.Contains(stderr.String(), "slurm kill path: OverTimeLimit 0s + up to 30s between slurmctld's time-limit checks + KillWait 5s = 35s") ||
			!strings.Contains(stderr.String(), "smallest safe grace 40s") {
			t.Fatalf("config check with grace %s does not give Slurm's kill path:\n%s", c.grace, stderr.String())
		}
		if got := strings.Contains(stderr.String(), "warning: teardown.grace "+c.grace+" is shorter than slurm's kill path"); got != c.warn {
			t.Fatalf("config check with grace %s: warning %v, want %v:\n%s", c.grace, got, c.warn, stderr.String())
		}
	}
	hang := startHangfs(t, s.path("fuse"))
	w := j.agg.watch(t)
	job := s.submit("--time=1", "--wrap", "trap '' TERM; exec cat "+hang.file())
	hang.waitRead(60 * time.Second)

	reg := registeredJob(t, j, job, 20*time.Second)
	// The Prolog named the job's user (SLURM_JOB_USER).
	owner := jobOwner(t)
	testutil.Eventually(t, 5*time.Second, "the Prolog's user on job "+job, func() bool {
		for _, jb := range agentStatus(t, a).Jobs {
			if jb.ID == job && jb.User != "" {
				return true
			}
		}
		return false
	})
	checkJobUser(t, a, job, owner)
	e := s.slurmEndTime(job)
	if d := reg.Expiration.Sub(e); d < -time.Second || d > time.Second {
		t.Fatalf("the agent's E %v, Slurm's EndTime %v: the controller's registration is not the one enforced", *reg.Expiration, e)
	}
	if !strings.HasPrefix(reg.ForeignName, "freezer:/slurm") || !strings.HasSuffix(reg.ForeignName, "/job_"+job) {
		t.Fatalf("the job's cgroup %q, want Slurm's freezer:/slurm.../job_%s", reg.ForeignName, job)
	}
	d := reg.Expiration.Add(slurmJobGrace)
	if reg.Deadline == nil || !reg.Deadline.Equal(d) {
		t.Fatalf("deadline %v, want E + G = %v", reg.Deadline, d)
	}
	// The v1 cgroup is read once a second: the task shows within that
	// on an idle machine.
	var task int
	var st api.Status
	if !testutil.Poll(30*time.Second, func() bool {
		st = agentStatus(t, a)
		for _, jb := range st.Jobs {
			if jb.ID == job && len(jb.Processes) > 0 {
				task = jb.Processes[len(jb.Processes)-1]
			}
		}
		return task != 0
	}) {
		t.Fatalf("the agent lists no process of job %s's cgroup after 30 s: %+v", job, st.Jobs)
	}
	t.Logf("job %s: E %s, D = E + %v; its cgroup %s lists %v", job, reg.Expiration.Format(time.RFC3339), slurmJobGrace, reg.ForeignName, st.Jobs)

	// From E, the aggregator serves the node tearing down, free at E + G.
	td, ev := w.next(t, s.host, "teardown", time.Until(*reg.Expiration)+10*time.Second)
	if td.FreeAt == nil || td.FreeAt.UnixMilli() != d.UnixMilli() {
		t.Fatalf("served %s free_at %v, want free_at = E + G = %v", td.State, td.FreeAt, d)
	}
	t.Logf("teardown served %.2f s after E, free_at = E + G", ev.At.Sub(*reg.Expiration).Seconds())

	state, reason := s.waitNode("drained", time.Until(d)+15*time.Second, func(state, _ string) bool {
		return strings.HasPrefix(state, "drain")
	})
	late := time.Since(d)
	t.Logf("Slurm %q %v after E + G: %q", state, late.Round(time.Millisecond), reason)
	if late > 2*time.Second || late < 0 {
		t.Errorf("Slurm drained the node %v after E + G, want within 2 s", late)
	}
	want := fmt.Sprintf("gracewatch: job %s not ended by its deadline (E + %v): 1 unkillable (pid %d cat, D in request_wait_answer", job, slurmJobGrace, task)
	if own, _ := ownReason(t, reason); !strings.HasPrefix(own, want) {
		t.Fatalf("Slurm's reason %q, want %q...", reason, want)
	}
	// The agent's report names the user; the aggregator serves it.
	checkServedUser(t, j.c, j.agg, s.host, job, owner)
	if _, after := w.next(t, s.host, "down", 5*time.Second); after.At.Before(d) {
		t.Fatalf("down served at %v, before E + G %v", after.At, d)
	}
	w.cancel()

	// An administrator takes the drain over with a reason of their own:
	// gracewatch's later reasons never overwrite it.
	const admin = "admin: looking at the FUSE server"
	s.must("scontrol", "update", "NodeName="+s.host, "State=DRAIN", "Reason="+admin)

	// The FUSE server ends: the task dies, Slurm completes the job and runs
	// the Epilog; the agent releases the job. gracewatch's reason says the
	// hang is gone; Slurm keeps the administrator's.
	if err := hang.stop(); err != nil {
		t.Fatal(err)
	}
	j.agg.waitNode(t, s.host, "its reason saying gone", 30*time.Second, func(n node) bool { return strings.Contains(n.Reason, "; gone since ") })
	// The on=reason actuator has run with that reason (it ran to its end:
	// the aggregator logs a run once its command has exited).
	testutil.Eventually(t, aggReasonWait+5*time.Second, "the on=reason actuator run with the reason saying gone", func() bool {
		return logged(j.agg.proc, `"msg":"actuator ran"`, `"transition":"reason"`, "; gone since ")
	})
	if state, reason, err := s.node(); err != nil || !strings.HasPrefix(state, "drain") || reason != admin {
		t.Fatalf("after gracewatch's reason changed Slurm has %q %q (%v), want the administrator's drain", state, reason, err)
	}
	if !testutil.Poll(90*time.Second, func() bool { return s.jobGone(job) }) {
		t.Fatalf("job %s still listed 90 s after its task was freed", job)
	}
	// The released teardown is in the aggregator's history: the grace
	// advisor lists the Prolog's user among those whose teardowns ran long.
	checkGraceTopUser(t, j.c, j.agg, "1s", owner)
	// gracewatch's resume leaves the administrator's drain too.
	ups := actuatorRuns(j.agg, "up")
	aggregatorCLI(t, j.c, j.agg, "resume", s.host, "--reason", "FUSE server restarted")
	j.agg.waitNode(t, s.host, "up", 10*time.Second, func(n node) bool { return n.State == "up" })
	waitActuatorRuns(t, j.agg, "up", ups+1, 10*time.Second)
	if state, reason, err := s.node(); err != nil || !strings.HasPrefix(state, "drain") || reason != admin {
		t.Fatalf("after gracewatch's resume Slurm has %q %q (%v), want the administrator's drain", state, reason, err)
	}
}

// TestSlurmJobCompare (GRACEWATCH_SLURM_COMPARE=1, about 5 minutes) runs
// the hung job of TestSlurmJobOverdue under Slurm alone (same KillWait and
// UnkillableStepTimeout, proctrack/cgroup v1) and with gracewatch, each
// with a second job that needs the node waiting behind it, and logs when
// Slurm drains, with which reason, and what squeue --start says of the
// waiting job: BENCHMARKS.md, "A job task hung at its time limit".
func TestSlurmJobCompare(t *testing.T) {
	if os.Getenv("GRACEWATCH_SLURM_COMPARE") == "" {
		t.Skip("opt-in comparison (about 5 minutes): set GRACEWATCH_SLURM_COMPARE=1")
	}
	type run struct {
		name string
		e    time.Time
		r    hungRun
	}
	var runs []run
	t.Run("slurm alone", func(t *testing.T) {
		requireSlurm(t)
		s := newSlurmSite(t)
		real := s.path("epilog.true")
		os.WriteFile(real, []byte("#!/bin/sh\nexit 0\n"), 0o755)
		s.start(slurmConfig{Cgroup: true, KillWait: slurmJobKillWait, UnkillableStepTimeout: slurmJobUnkillable, Epilog: real})
		hang := startHangfs(t, s.path("fuse"))
		job := s.submit("--time=1", "--wrap", "trap '' TERM; exec cat "+hang.file())
		hang.waitRead(60 * time.Second)
		waiting := s.submit("--exclusive", "--wrap", "true")
		e := s.slurmEndTime(job)
		var r hungRun
		observeHung(t, s, &r, waiting, time.Until(e.Add(3*time.Minute)))
		runs = append(runs, run{"Slurm alone", e, r})
		cleanupRun(t, s, hang, job, waiting)
	})
	t.Run("slurm with gracewatch", func(t *testing.T) {
		j := startGracewatchSlurmJob(t)
		s := j.s
		hang := startHangfs(t, s.path("fuse"))
		job := s.submit("--time=1", "--wrap", "trap '' TERM; exec cat "+hang.file())
		hang.waitRead(60 * time.Second)
		waiting := s.submit("--exclusive", "--wrap", "true")
		reg := registeredJob(t, j, job, 20*time.Second)
		e := *reg.Expiration
		r := hungRun{deadline: e.Add(slurmJobGrace)}
		observeHung(t, s, &r, waiting, time.Until(e.Add(3*time.Minute)))
		runs = append(runs, run{"Slurm with gracewatch (G = " + slurmJobGrace.String() + ")", e, r})
		cleanupRun(t, s, hang, job, waiting)
		aggregatorCLI(t, j.c, j.agg, "resume", s.host, "--reason", "FUSE server restarted")
	})
	if len(runs) == 2 {
		alone, with := runs[0], runs[1]
		notDrainedNearD(t, alone.name, alone.e.Add(slurmJobGrace), alone.r.drained)
		drainedNearD(t, with.name, with.r.deadline, with.r.drained)
	}
	for _, x := range runs {
		drained := "not within 3 min of E"
		if !x.r.drained.IsZero() {
			drained = fmt.Sprintf("E + %.1f s", x.r.drained.Sub(x.e).Seconds())
		}
		t.Logf("%s: states %v; drained %s (%s) reason %q; waiting job's expected start %v, after the drain %s; still hung: %s",
			x.name, x.r.states, drained, x.r.state, x.r.reason, x.r.nextStart, x.r.afterDrain, x.r.leftover)
	}
}
