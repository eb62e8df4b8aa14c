package teardown

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/request"
	"github.com/gracewatch/gracewatch/internal/testutil"
)

// The error paths of escalation and release, opened by FakeCgroups.Fail.

// discard is an OutputSink that drops the epilogue's output.
type discard struct{}

func (discard) Stdout([]byte) error { return nil }
func (discard) Stderr([]byte) error { return nil }

func logTo(b *testutil.SyncBuffer) func(*Options) {
	return func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(b, nil)) }
}

// epilogIn runs /bin/true as job id's epilogue (the fake starts the real
// process, in no cgroup) and returns the job's own cgroup.
func (h *harness) epilogIn(id string) string {
	h.t.Helper()
	h.cg.StartProcesses = true
	if status, err := h.s.RunEpilog(context.Background(), id, request.EpilogRequest{Argv: []string{"/bin/true"}}, discard{}); err != nil || status != 0 {
		h.t.Fatalf("epilog %s: status %d, %v", id, status, err)
	}
	cg := "/fake/job-" + id
	if !slices.Contains(h.cg.Created(), cg) {
		h.t.Fatalf("job %s: cgroup %s not made (made: %v)", id, cg, h.cg.Created())
	}
	return cg
}

func jobOf(st Status, id string) Job {
	for _, j := range st.Jobs {
		if j.ID == id {
			return j
		}
	}
	return Job{}
}

// A kill that fails does not stop the escalation: the failure is logged
// with the cgroup and the error, the survivors are still classified
// unkillable_after later, and the classification's second kill pass tries
// again.
func TestKillFailureStillEscalates(t *testing.T) {
	logs := &testutil.SyncBuffer{}
	h := newHarness(t, logTo(logs))
	h.cg.SetPopulated("/fake/job-k", true) // a grandchild of the epilogue lives on
	cg := h.epilogIn("k")
	errKill := errors.New("write cgroup.kill: permission denied")
	h.cg.Fail(OpKill, cg, errKill)

	h.advance(60 * time.Second)
	h.eventually("SIGTERM", func(st Status) bool { return jobOf(st, "k").Escalation == escTerm })
	h.advance(10 * time.Second)
	st := h.status()
	if j := jobOf(st, "k"); j.Escalation != escKill || j.Phase != PhaseOverdue || st.State != StateDown {
		t.Fatalf("after the failed kill: job %+v, node %s; want overdue at kill, node down", j, st.State)
	}
	if got := h.cg.Kills(); !slices.Equal(got, []string{cg}) {
		t.Fatalf("kills %v, want one of %s", got, cg)
	}
	if !logs.HasLine("kill failed", cg, errKill.Error()) {
		t.Errorf("the failed kill is not logged with its cgroup and error:\n%s", logs)
	}
	h.advance(30 * time.Second)
	h.eventually("classification after the failed kill", func(st Status) bool {
		return jobOf(st, "k").Escalation == escClassified && len(h.diag.stages()) == 2
	})
	if got := h.cg.Kills(); len(got) != 2 {
		t.Fatalf("kills %v, want the classification's second pass too", got)
	}
}

// A signal that fails (the foreign cgroup's SIGTERM) does not stop the
// escalation either: SIGKILL follows kill_wait later.
func TestSignalFailureStillKills(t *testing.T) {
	logs := &testutil.SyncBuffer{}
	h := newHarness(t, logTo(logs))
	h.start1("s", t0.Add(time.Hour).Format(time.RFC3339), "", "/foreign/s")
	h.cg.SetPopulated("/foreign/s", true)
	h.cg.Fail(OpSignal, "/foreign/s", syscall.EPERM)
	h.s.EndJob(context.Background(), "s")
	h.advance(60 * time.Second)
	h.eventually("SIGTERM", func(st Status) bool { return jobOf(st, "s").Escalation == escTerm })
	if !logs.HasLine("signal failed", "/foreign/s", "signal=terminated", syscall.EPERM.Error()) {
		t.Errorf("the failed SIGTERM is not logged:\n%s", logs)
	}
	h.advance(10 * time.Second)
	if got := h.cg.Signals(); !slices.Equal(got, []string{"/foreign/s terminated", "/foreign/s killed"}) {
		t.Fatalf("signals %v, want SIGTERM then SIGKILL", got)
	}
	if j := jobOf(h.status(), "s"); j.Escalation != escKill {
		t.Fatalf("escalation %q, want kill", j.Escalation)
	}
}

// A cgroup that cannot be removed does not hold the release back: the job
// is released clean and the node stays up; the cgroup is kept in the job's
// record and removed at the next release.
func TestRemoveFailureKeepsCgroupAndRetries(t *testing.T) {
	logs := &testutil.SyncBuffer{}
	h := newHarness(t, logTo(logs))
	h.cg.Fail(OpRemove, "*", syscall.EBUSY)
	cg := h.epilogIn("r")
	st := h.eventually("release", func(st Status) bool { return jobOf(st, "r").Phase == PhaseReleased })
	if j := jobOf(st, "r"); j.Outcome != "clean" || j.Cgroup != cg || st.State != StateUp {
		t.Fatalf("job %+v node %s: want released clean with its cgroup kept, node up", j, st.State)
	}
	if !logs.HasLine("cannot remove job cgroup", cg, syscall.EBUSY.Error()) {
		t.Errorf("the failed removal is not logged:\n%s", logs)
	}

	h.cg.Fail(OpRemove, "*", nil)
	cg2 := h.epilogIn("r2")
	st = h.eventually("the next release", func(st Status) bool { return jobOf(st, "r2").Phase == PhaseReleased })
	if j := jobOf(st, "r"); j.Cgroup != "" {
		t.Fatalf("job r still holds cgroup %s after the next release", j.Cgroup)
	}
	if got := h.cg.Removed(); !slices.Equal(got, []string{cg, cg2, cg}) {
		t.Fatalf("removals %v, want %s, %s, then %s again", got, cg, cg2, cg)
	}
}

// A cgroup that cannot be watched (inotify's limit) is polled instead: its
// emptying releases the teardown within a second, not as a violation at
// the deadline.
func TestWatchFailureFallsBackToPolling(t *testing.T) {
	logs := &testutil.SyncBuffer{}
	h := newHarness(t, logTo(logs))
	h.cg.Fail(OpWatch, "*", syscall.ENOSPC)
	h.endRunning("w", "", "/foreign/w")
	if h.cg.Watched("/foreign/w") {
		t.Fatal("the fake accepted a failing watch")
	}
	if !logs.HasLine("cannot watch cgroup", "/foreign/w", "no space left on device") {
		t.Errorf("the failed watch is not logged:\n%s", logs)
	}
	h.cg.SetPopulated("/foreign/w", false) // no watcher to tell
	h.advance(time.Second)
	st := h.status()
	if j := jobOf(st, "w"); j.Phase != PhaseReleased || j.Outcome != "clean" || st.State != StateUp {
		t.Fatalf("a second after the unwatched cgroup emptied: job %+v node %s, want released clean, up", j, st.State)
	}
	if sig := h.cg.Signals(); len(sig) != 0 {
		t.Fatalf("signals %v", sig)
	}
}

// A job cgroup that cannot be made fails the epilog with an error naming
// the job and the cause; the registration it made has nothing to wait for
// and is released at its deadline without a violation.
func TestCreateFailureFailsTheEpilog(t *testing.T) {
	log := &eventLog{}
	h := newHarness(t, func(o *Options) { o.OnEvent = log.add })
	h.cg.StartProcesses = true
	h.cg.Fail(OpCreate, "*", syscall.ENOSPC)
	_, err := h.s.RunEpilog(context.Background(), "c", request.EpilogRequest{Argv: []string{"/bin/true"}}, nil)
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "job c") {
		t.Fatalf("epilog: %v, want an error naming job c and wrapping ENOSPC", err)
	}
	if got, want := log.lines(), []string{"registered c", "epilog-start-error c"}; !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	h.advance(61 * time.Second)
	st := h.status()
	if j := jobOf(st, "c"); j.Phase != PhaseReleased || st.State != StateUp {
		t.Fatalf("after the deadline: job %+v node %s, want released, up", j, st.State)
	}
	if len(h.diag.stages()) != 0 || len(h.cg.Signals()) != 0 {
		t.Fatalf("a job with nothing to watch was escalated: snapshots %v signals %v", h.diag.stages(), h.cg.Signals())
	}
}
