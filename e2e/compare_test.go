package e2e

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// The compare tests (TestSlurmCompare, TestSlurmJobCompare,
// TestSlurmPlanCompare, TestFluxCompare, TestFluxPlanCompare) run the same
// scene under the scheduler alone and with gracewatch, log the figures of
// BENCHMARKS.md, and assert the outcome that gracewatch is for: a hung node
// drained within drainWithin of its D (and the scheduler alone not), short
// jobs started before a big one that waits for a node tearing down and
// fewer idle node-seconds (with free_at in the scheduler's plan). They are
// opt-in (minutes each): GRACEWATCH_SLURM_COMPARE=1, GRACEWATCH_FLUX_COMPARE=1.
//
// GRACEWATCH_COMPARE_WITHOUT is their negative control: a comma-separated
// list of the effects to switch off in the gracewatch runs ("drains": the
// shipped actuator scripts are replaced by ones that change nothing in the
// scheduler; "reservations": the Slurm reservations until free_at are not
// configured; "phantom": Fluxion gets no allocation until free_at; "plan":
// Flux runs without the gracewatch jobtap plugin), so that
// a person can see each compare test fail when what it measures is gone.
const compareWithoutEnv = "GRACEWATCH_COMPARE_WITHOUT"

// compareEffects are the effects GRACEWATCH_COMPARE_WITHOUT may name.
var compareEffects = []string{"drains", "reservations", "phantom", "plan"}

// drainWithin is how soon after D the scheduler must show a hung node
// drained with gracewatch (measured: D + 0.12 s median on Slurm, below
// 0.5 s on Flux; BENCHMARKS.md).
const drainWithin = 2 * time.Second

// compareWithout reports whether GRACEWATCH_COMPARE_WITHOUT switches effect
// off; it fails t on a name it does not know.
func compareWithout(t testing.TB, effect string) bool {
	t.Helper()
	if !slices.Contains(compareEffects, effect) {
		t.Fatalf("compareWithout(%q): not one of %v", effect, compareEffects)
	}
	off := false
	for _, e := range strings.Split(os.Getenv(compareWithoutEnv), ",") {
		switch e = strings.TrimSpace(e); {
		case e == "":
		case !slices.Contains(compareEffects, e):
			t.Fatalf("%s=%q: %q is not one of %v", compareWithoutEnv, os.Getenv(compareWithoutEnv), e, compareEffects)
		case e == effect:
			off = true
		}
	}
	if off {
		t.Logf("%s: gracewatch's %s are OFF: a compare test is expected to fail", compareWithoutEnv, effect)
	}
	return off
}

// noopActuator is the actuator script of GRACEWATCH_COMPARE_WITHOUT=drains:
// it succeeds and changes nothing in the scheduler.
const noopActuator = "#!/bin/sh\n# GRACEWATCH_COMPARE_WITHOUT=drains: the scheduler is not told.\nexit 0\n"

// actuatorScript is the text of the shipped actuator script example (a
// path under packaging/examples) that a test site runs, or noopActuator
// when drains are switched off.
func actuatorScript(t testing.TB, example string) string {
	t.Helper()
	if compareWithout(t, "drains") {
		return noopActuator
	}
	return readExample(t, example)
}

// drainedNearD checks that the scheduler showed the node drained at or
// after D and within drainWithin of it.
func drainedNearD(t testing.TB, what string, d, drained time.Time) {
	t.Helper()
	switch {
	case d.IsZero():
		t.Errorf("%s: no D", what)
	case drained.IsZero():
		t.Errorf("%s: the scheduler never showed the node drained (D %v)", what, d.Format(time.TimeOnly))
	case drained.Before(d):
		t.Errorf("%s: drained %v before D", what, d.Sub(drained))
	case drained.Sub(d) > drainWithin:
		t.Errorf("%s: drained D + %v, want within %v of D", what, drained.Sub(d).Round(time.Millisecond), drainWithin)
	}
}

// notDrainedNearD checks that the scheduler alone did not drain the node by
// D + drainWithin, the promise it cannot keep without gracewatch.
func notDrainedNearD(t testing.TB, what string, d, drained time.Time) {
	t.Helper()
	if !drained.IsZero() && !drained.After(d.Add(drainWithin)) {
		t.Errorf("%s: the scheduler alone drained the node at D %+v: the comparison has no contrast", what, drained.Sub(d).Round(time.Millisecond))
	}
}

// plannedBetter checks the outcome of free_at in the scheduler's plan: every
// short job started before the big job, and the other nodes sat idle for
// fewer node-seconds than in the run without it.
func plannedBetter(t testing.TB, with, without string, shortStarts []time.Duration, bigStart time.Duration, idleWith, idleWithout float64) {
	t.Helper()
	for i, s := range shortStarts {
		if s == 0 || s >= bigStart {
			t.Errorf("%s: short job %d started +%v, the big job +%v: want every short job before the big one", with, i+1, s, bigStart)
		}
	}
	if idleWith >= idleWithout {
		t.Errorf("%s: %.0f idle node-seconds, %s: %.0f: want fewer with the plan", with, idleWith, without, idleWithout)
	}
}

func TestCompareWithout(t *testing.T) {
	for _, tt := range []struct {
		env  string
		want map[string]bool
	}{
		{"", map[string]bool{}},
		{"drains", map[string]bool{"drains": true}},
		{" drains , phantom", map[string]bool{"drains": true, "phantom": true}},
	} {
		t.Run(fmt.Sprintf("%q", tt.env), func(t *testing.T) {
			t.Setenv(compareWithoutEnv, tt.env)
			for _, e := range compareEffects {
				if got := compareWithout(t, e); got != tt.want[e] {
					t.Errorf("compareWithout(%q) = %t, want %t", e, got, tt.want[e])
				}
			}
		})
	}
	if got := actuatorScript(t, "aggregator/slurm-actuator.sh"); got == noopActuator || !strings.Contains(got, "scontrol") {
		t.Errorf("the shipped actuator script, with drains on: %.80q", got)
	}
	t.Setenv(compareWithoutEnv, "drains")
	if got := actuatorScript(t, "aggregator/slurm-actuator.sh"); got != noopActuator {
		t.Errorf("with drains off: %.80q, want the no-op", got)
	}
}
