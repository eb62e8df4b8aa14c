package e2e

// The gracewatch jobtap plugin not loaded (docs/DESIGN.md, "Flux: the plan
// carries G"): a record the user writes into the jobspec is not taken for
// the user's E, and a job planned with G whose plugin was removed before
// it started, which its exec system ends at E + G, still gets its grace.

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// fluxGraceUnloaded runs with the plugin removed (and loads it again at
// the end).
func fluxGraceUnloaded(t *testing.T, g *gracewatchFlux, planG time.Duration) {
	s := g.s
	a := g.agents["fake0"]
	plugin := jobtapPlugin(t, s.prefix)
	// A job planned with G while the plugin is loaded, held until it is
	// removed.
	planned := s.submit("--urgency=0", "-N1", "--requires=rank:0", "-t", "3s", "--job-name=planned-with-g", "sleep", "300")
	s.must("jobtap", "remove", "gracewatch.so")
	defer s.must("jobtap", "load", plugin)

	t.Run("a record the user wrote is not the plugin's", func(t *testing.T) {
		// duration 23 = 8 + 15: what the plugin would have written, from
		// the user. Taken, it would make the agent's E 15 s earlier than
		// the exec system's end and leave the teardown no grace.
		forged := s.submit("-N1", "--requires=rank:0", "-t", "23s", "--job-name=forged",
			"--setattr=system.gracewatch.duration=8", "--setattr=system.gracewatch.grace=15", "sleep", "300")
		s.waitJob(forged, "running", 30*time.Second, func(i jobInfo) bool { return i.State == "RUN" })
		var js struct {
			Attributes struct {
				System struct {
					Duration   float64 `json:"duration"`
					Gracewatch struct {
						Duration, Grace float64
					} `json:"gracewatch"`
				} `json:"system"`
			} `json:"attributes"`
		}
		if err := json.Unmarshal([]byte(s.must("job", "info", forged.f58, "jobspec")), &js); err != nil {
			t.Fatal(err)
		}
		if sys := js.Attributes.System; sys.Duration != 23 || sys.Gracewatch.Duration != 8 || sys.Gracewatch.Grace != 15 {
			t.Fatalf("the jobspec does not carry the user's record: duration %v, record %+v", sys.Duration, sys.Gracewatch)
		}
		j := jobDeadline(t, a, forged.dec)
		e := unixTime(s.expiration(forged))
		t.Logf("forged record (T 8 s + G 15 s, duration 23 s): the agent has E %v, R's expiration %v", j.Expiration, e)
		if j.Expiration == nil || !j.Expiration.Equal(e) {
			t.Errorf("the agent has E = %v for a job whose record the user wrote, want R's expiration %v", j.Expiration, e)
		}
		s.must("cancel", forged.f58)
		s.waitJob(forged, "inactive", 60*time.Second, func(i jobInfo) bool { return i.State == "INACTIVE" })
	})

	t.Run("planned with G, started without the plugin: the teardown keeps its grace", func(t *testing.T) {
		hang := startHangfs(t, s.path("fuse-unloaded"))
		s.housekeeping("fake0", "cat "+hang.file()+" >/dev/null")
		defer s.housekeeping("fake0", "")
		s.must("job", "urgency", planned.f58, "16")
		s.waitJob(planned, "running", 30*time.Second, func(i jobInfo) bool { return i.State == "RUN" })
		// The prolog took the plugin's record (its jobspec-update): the
		// user's E, start + 3 s. Nothing posts the resource-update, so
		// the exec system ends the job at R's E + G.
		j := jobDeadline(t, a, planned.dec)
		rExp := unixTime(s.expiration(planned))
		if j.Expiration == nil || math.Abs(rExp.Sub(*j.Expiration).Seconds()-planG.Seconds()) > 0.01 {
			t.Fatalf("the agent has E = %v, R's expiration is %v: want R's less G (%v)", j.Expiration, rExp, planG)
		}
		hk := s.hkStart(planned, "fake0", time.Until(rExp)+30*time.Second)
		// The job ended after the agent's E: the agent asks
		// flux-expiration.sh, which answers R's E + G; D = that + G.
		var got string
		testutil.Eventually(t, 30*time.Second, "the agent's deadline re-armed from Flux's expiration", func() bool {
			for _, x := range agentStatus(t, a).Jobs {
				if x.ID == planned.dec && x.Expiration != nil && x.Deadline != nil {
					got = fmt.Sprintf("E %v, D %v", x.Expiration, x.Deadline)
					return x.Expiration.Equal(rExp) && x.Deadline.Equal(rExp.Add(planG))
				}
			}
			return false
		})
		t.Logf("housekeeping started at R's E%+.3fs; the agent: %s", hk.Sub(rExp).Seconds(), got)
		if n := strings.Count(a.logs.String(), "expiration command: the job's expiration moved"); n != 1 {
			t.Errorf("the agent logged %d moves of the expiration, want 1", n)
		}
		// The hang ends within the new grace: the node comes back and
		// was never drained (its drain would be in the resource eventlog
		// before the housekeeping's end).
		if err := hang.stop(); err != nil {
			t.Fatal(err)
		}
		s.waitNode("fake0", "out of housekeeping", 30*time.Second, func(st, _ string) bool { return st == "avail" })
		for _, ev := range s.drains(0) {
			if !ev.At.Before(hk) {
				t.Errorf("fake0 was drained at R's E%+.3fs (%q): its teardown had no grace", ev.At.Sub(rExp).Seconds(), ev.Reason)
			}
		}
		s.waitJob(planned, "inactive", 30*time.Second, func(i jobInfo) bool { return i.State == "INACTIVE" })
	})
}
