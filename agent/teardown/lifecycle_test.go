package teardown

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/diagnose"
)

// The diagnosis follows the hang (issue 12): each report's outcome says
// where the teardown stands, the reason follows a change of the survivors,
// and once they are gone the reason says so and what clears the latch.
func TestDiagnosisLifecycle(t *testing.T) {
	h := newHarness(t, nil) // G 60s, kill_wait 10s, unkillable_after 30s
	h.diag.procs = []diagnose.Process{{PID: 42, Comm: "cat", State: "S", Wchan: "request_wait_answer", Class: diagnose.Missed}}
	h.endRunning("9", "", "/foreign/9")
	h.advance(60 * time.Second)
	st := h.eventually("down, still running", func(st Status) bool {
		return st.State == StateDown && strings.Contains(st.Reason, "1 still running (pid 42 cat")
	})
	rs, err := h.s.Diagnose(context.Background(), "9")
	if err != nil || len(rs) != 1 || rs[0].Outcome != diagnose.OutcomeEscalated {
		t.Fatalf("after SIGTERM: reports %+v, %v; want one, outcome escalated", rs, err)
	}
	// Classified: unkillable. The reason says it.
	h.diag.setProcs(diagnose.Process{PID: 42, Comm: "cat", State: "D", Wchan: "request_wait_answer", Class: diagnose.Unkillable})
	h.advance(10 * time.Second) // SIGKILL
	h.advance(30 * time.Second) // classification
	st = h.eventually("unkillable", func(st Status) bool { return strings.Contains(st.Reason, "1 unkillable (pid 42 cat") })
	if rs, _ := h.s.Diagnose(context.Background(), "9"); rs[0].Outcome != diagnose.OutcomeHung || rs[0].History {
		t.Fatalf("classified: outcome %q history %v", rs[0].Outcome, rs[0].History)
	}
	// A recheck that finds the same saves no new report.
	saved := len(h.diag.stages())
	reportsBefore := h.s.jobs["9"].Report
	h.advance(recheckInterval)
	h.eventually("the unchanged recheck", func(Status) bool { return len(h.diag.stages()) == saved+1 })
	if h.status(); h.s.jobs["9"].Report != reportsBefore {
		t.Fatalf("an unchanged recheck saved a new report")
	}
	// A change of the survivors shows at the next recheck.
	h.diag.setProcs(diagnose.Process{PID: 42, Comm: "cat", State: "D", Wchan: "request_wait_answer", Class: diagnose.Unkillable},
		diagnose.Process{PID: 43, Comm: "sh", State: "Z", Class: diagnose.Zombie})
	h.advance(recheckInterval)
	st = h.eventually("the recheck's change in the reason", func(st Status) bool { return strings.Contains(st.Reason, "1 zombie") })
	// Gone: the latch (auto_resume never) is all that is left.
	h.clk.Advance(5 * time.Second)
	gone := h.clk.Now()
	h.cg.SetPopulated("/foreign/9", false)
	st = h.status()
	want := "; gone since " + gone.UTC().Format("15:04:05Z") + ", resume to clear"
	if st.State != StateDown || !strings.HasSuffix(st.Reason, want) {
		t.Fatalf("after the processes went: %s %q, want down ending %q", st.State, st.Reason, want)
	}
	rs, _ = h.s.Diagnose(context.Background(), "9")
	if len(rs) != 1 || !rs[0].History || rs[0].Timeline.Released.IsZero() {
		t.Fatalf("after release: %+v, want the report marked history with its release time", rs)
	}
	// No more rechecks after the release.
	n := len(h.diag.stages())
	h.advance(3 * recheckInterval)
	if got := len(h.diag.stages()); got != n {
		t.Fatalf("%d snapshots after the release", got-n)
	}
}

// setProcs sets what the fake diagnoser finds, while snapshots may run.
func (d *fakeDiagnoser) setProcs(ps ...diagnose.Process) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.procs = ps
}
