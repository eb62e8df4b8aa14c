package e2e

// One hung housekeeping on one node of four, as TestFlux checks it and
// TestFluxCompare measures it under Flux alone and with gracewatch.

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/testutil/benchenv"
)

func unixTime(sec float64) time.Time {
	s, f := math.Modf(sec)
	return time.Unix(int64(s), int64(f*1e9))
}

// fluxHungRun is one hung housekeeping on fake0 as Flux (and gracewatch)
// saw it, with the other nodes running jobs and one job waiting.
type fluxHungRun struct {
	hung, waiting fluxJob
	others        []fluxJob
	e             time.Time // the hung job's expiration E (R)
	othersE       time.Time // the other jobs' expiration
	hkStart       time.Time // the real housekeeping started: the job's tasks ended
	d             time.Time // gracewatch's D (zero without gracewatch)
	drained       time.Time // Flux's drain event of fake0 (zero: none)
	reason        string
	estimates     []estimate // the waiting job's t_estimate, when it changed
	started       time.Time  // the waiting job's t_run (zero: not within the observation)
	startedOn     string
	othersRunning bool // every other job still ran when fake0 was drained
}

type estimate struct {
	at    time.Time
	value float64 // 0: none
}

// firstEstimate is the waiting job's first t_estimate and when it was
// sampled (0: none).
func (r fluxHungRun) firstEstimate() (float64, time.Time) {
	for _, e := range r.estimates {
		if e.value != 0 {
			return e.value, e.at
		}
	}
	return 0, time.Time{}
}

// lastEstimate is the waiting job's last t_estimate before it started (0:
// none).
func (r fluxHungRun) lastEstimate() float64 {
	v := 0.0
	for _, e := range r.estimates {
		if e.value != 0 {
			v = e.value
		}
	}
	return v
}

func (r fluxHungRun) String() string {
	rel := func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return fmt.Sprintf("E%+.2fs", t.Sub(r.e).Seconds())
	}
	var est []string
	for _, e := range r.estimates {
		v := "none"
		if e.value != 0 {
			v = rel(unixTime(e.value))
		}
		est = append(est, fmt.Sprintf("%s at %s", v, rel(e.at)))
	}
	s := fmt.Sprintf("housekeeping started %s; waiting job's t_estimate: %s; waiting job started %s on %q; other jobs' E %s",
		rel(r.hkStart), strings.Join(est, ", "), rel(r.started), r.startedOn, rel(r.othersE))
	if !r.d.IsZero() {
		s += fmt.Sprintf("; D %s", rel(r.d))
	}
	if r.drained.IsZero() {
		return s + "; fake0 never drained"
	}
	return s + fmt.Sprintf("; fake0 drained %s (D%+.2fs): %q", rel(r.drained), r.drained.Sub(r.d).Seconds(), r.reason)
}

// fluxHung runs a job with a 4 s time limit on fake0 whose housekeeping
// hangs (a read of hang's file), jobs with a 14 s limit on the other
// nodes, and then a one-node job that waits; it observes the waiting job
// (its t_estimate and start) and fake0's drain until the waiting job has
// started and, with gracewatch (drain true), fake0 is drained, or until
// limit has passed since E.
func fluxHung(t *testing.T, s *fluxSite, hang *hangServer, drain bool, limit time.Duration) fluxHungRun {
	t.Helper()
	s.housekeeping("fake0", "cat "+hang.file()+" >/dev/null")
	t.Cleanup(func() { s.housekeeping("fake0", "") })
	var r fluxHungRun
	before := len(s.drains(0)) // earlier runs' drains of fake0
	r.hung = s.submit("-N1", "--requires=rank:0", "-t", "4s", "--job-name=hung", "sleep", "300")
	for i := 1; i < fluxNodes; i++ {
		r.others = append(r.others, s.submit("-N1", fmt.Sprintf("--requires=rank:%d", i), "-t", "14s", "--job-name=other", "sleep", "300"))
	}
	for _, j := range append([]fluxJob{r.hung}, r.others...) {
		s.waitJob(j, "running", 20*time.Second, func(i jobInfo) bool { return i.State == "RUN" })
	}
	r.waiting = s.submit("-N1", "-t", "5s", "--job-name=waiting", "true")
	r.e = unixTime(s.expiration(r.hung))
	r.othersE = unixTime(s.expiration(r.others[0]))

	end := r.e.Add(limit)
	var last float64 = -1
	for time.Now().Before(end) {
		if r.hkStart.IsZero() && time.Now().After(r.e) {
			hang.waitRead(20 * time.Second)
			r.hkStart = s.hkStart(r.hung, "fake0", 5*time.Second)
		}
		info, err := s.job(r.waiting)
		now := time.Now()
		if err == nil {
			v := 0.0
			if info.Annotations.Sched.TEstimate != nil {
				v = *info.Annotations.Sched.TEstimate
			}
			if v != last {
				r.estimates = append(r.estimates, estimate{at: now, value: v})
				last = v
			}
			if info.TRun > 0 && r.started.IsZero() {
				r.started, r.startedOn = unixTime(info.TRun), info.Nodelist
			}
		}
		if r.drained.IsZero() {
			if evs := s.drains(0); len(evs) > before {
				r.drained, r.reason = evs[before].At, evs[before].Reason
				r.othersRunning = true
				for _, j := range r.others {
					if info, err := s.job(j); err != nil || info.State != "RUN" {
						r.othersRunning = false
					}
				}
			}
		}
		if !r.started.IsZero() && (!drain || !r.drained.IsZero()) {
			break
		}
		time.Sleep(200 * time.Millisecond) // not a wait: the observation's sampling interval
	}
	return r
}

// TestFluxCompare measures the same hung housekeeping on one node of four
// (a reader of a FUSE file that never answers) under Flux alone and under
// Flux with gracewatch (grace G), with a one-node job waiting under
// Fluxion's queue-policy easy, for BENCHMARKS.md: the waiting job's
// t_estimate over time, when and where it started, and when fake0 was
// drained. It runs only with GRACEWATCH_FLUX_COMPARE=1 (about two
// minutes); GRACEWATCH_FLUX_RUNS (default 3) runs per case,
// GRACEWATCH_FLUX_OBSERVE (default 40s) bounds each observation after E.
// TestFlux checks the gracewatch half in every run.
func TestFluxCompare(t *testing.T) {
	if os.Getenv("GRACEWATCH_FLUX_COMPARE") != "1" {
		t.Skip("set GRACEWATCH_FLUX_COMPARE=1 to measure Flux alone against Flux with gracewatch (about two minutes)")
	}
	runs := benchenv.Int(t, "GRACEWATCH_FLUX_RUNS", 3)
	observe := benchenv.Duration(t, "GRACEWATCH_FLUX_OBSERVE", 40*time.Second)
	t.Run("flux alone", func(t *testing.T) {
		s := startFlux(t, fluxConfig{Size: fluxNodes})
		for i := 0; i < runs; i++ {
			hang := startHangfs(t, s.path(fmt.Sprintf("fuse%d", i)))
			r := fluxHung(t, s, hang, false, observe)
			st, why, _ := s.node("fake0")
			t.Logf("Flux alone run %d: %s; fake0 then %q %q", i+1, r, st, why)
			notDrainedNearD(t, fmt.Sprintf("Flux alone, run %d", i+1), r.hkStart.Add(fluxGrace), r.drained)
			endHungRun(t, s, hang, r)
		}
	})
	t.Run("flux with gracewatch", func(t *testing.T) {
		g := startGracewatchFlux(t)
		var late []float64
		for i := 0; i < runs; i++ {
			hang := startHangfs(t, g.s.path(fmt.Sprintf("fuse%d", i)))
			r := fluxHung(t, g.s, hang, true, observe)
			r.d = *jobDeadline(t, g.agents["fake0"], r.hung.dec).Deadline
			t.Logf("Flux with gracewatch (G=%v) run %d: %s; agent latched and sent SIGTERM at D%+.3fs, the down actuator (flux-actuator.sh drain) ran %v",
				fluxGrace, i+1, r, agentLogTime(g.agents["fake0"], "escalation", r.hung.dec, "SIGTERM").Sub(r.d).Seconds(), lastActuatorDuration(g.agg, "down"))
			if !r.drained.IsZero() {
				late = append(late, r.drained.Sub(r.d).Seconds())
			}
			drainedNearD(t, fmt.Sprintf("Flux with gracewatch, run %d", i+1), r.d, r.drained)
			endHungRun(t, g.s, hang, r)
			aggregatorCLI(t, g.c, g.agg, "resume", "fake0", "--reason", "FUSE server restarted")
			g.agg.waitNode(t, "fake0", "up", 10*time.Second, func(n node) bool { return n.State == "up" })
		}
		if len(late) > 0 {
			t.Logf("SUMMARY Flux with gracewatch: D to drain: %s", medianRange(late))
		}
	})
}

// endHungRun ends the hang of a fluxHung run and waits until its jobs are
// inactive.
func endHungRun(t *testing.T, s *fluxSite, hang *hangServer, r fluxHungRun) {
	t.Helper()
	if err := hang.stop(); err != nil {
		t.Fatal(err)
	}
	for _, j := range append([]fluxJob{r.hung, r.waiting}, r.others...) {
		s.waitJob(j, "inactive", 30*time.Second, func(i jobInfo) bool { return i.State == "INACTIVE" })
	}
	s.waitNode("fake0", "out of housekeeping", 20*time.Second, func(st, _ string) bool { return st != "housekeeping" })
}
