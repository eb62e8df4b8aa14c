package agent_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/agent/cgroup/cgrouptest"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/internal/testutil/hangfs"
)

// The deadline E + G from registration, on a real agent (issue 9): the
// exec system registers the job and never says that it ended.

// unixArg writes t as the Unix seconds with nanoseconds that --expiration
// takes.
func unixArg(t time.Time) string { return fmt.Sprintf("%d.%09d", t.Unix(), t.Nanosecond()) }

// downAt polls the status (testutil.Poll: at most 50 ms apart) until the
// node is down and returns when that was first seen, and the status.
func (n *node) downAt(timeout time.Duration) (time.Time, api.Status) {
	n.t.Helper()
	var st api.Status
	var at time.Time
	if !testutil.Poll(timeout, func() bool {
		st = n.status()
		at = time.Now()
		return st.State == api.StateDown
	}) {
		n.t.Fatalf("not down within %v: %+v\nlogs:\n%s", timeout, st, n.logs)
	}
	return at, st
}

// 1. Registered with E and G, never ended: DOWN at E + G, not before, not
// later than E + G + 1 s, with "no end reported".
func TestNoEndReportedByTheDeadline(t *testing.T) {
	n := startNode(t, nodeOpts{grace: "2s"})
	e := time.Now().Add(time.Second)
	if _, stderr, code := n.cli("job", "start", "--job", "1", "--expiration", unixArg(e)); code != 0 {
		t.Fatalf("job start: %d %s", code, stderr)
	}
	d := e.Add(2 * time.Second)
	if j := n.status().Jobs[0]; j.Phase != api.PhaseRunning || j.Deadline == nil || j.Deadline.Sub(d).Abs() > time.Millisecond {
		t.Fatalf("registered: %+v, want running with deadline E + G = %v", j, d)
	}
	// From E on the node tears down, free at E + G at the latest.
	st := n.waitFor("teardown from E", 10*time.Second, func(st api.Status) bool { return st.State != api.StateUp })
	if st.State != api.StateTeardown || st.FreeAt == nil || !st.FreeAt.Equal(*st.Jobs[0].Deadline) {
		t.Fatalf("after E: %s free_at %v, want teardown free at E + G", st.State, st.FreeAt)
	}
	at, st := n.downAt(10 * time.Second)
	if at.Before(d) || at.After(d.Add(time.Second)) {
		t.Fatalf("down at E + G %+.3fs, want within [0, 1 s]", at.Sub(d).Seconds())
	}
	if want := "job 1: no end reported by the deadline (E + 2s)"; st.Reason != want {
		t.Fatalf("reason %q, want %q", st.Reason, want)
	}
	t.Logf("down %.0f ms after E + G", at.Sub(d).Seconds()*1000)
}

// foreignNode is an agent that may observe the test's own cgroups as the
// exec system's (foreign_cgroups).
func foreignNode(t *testing.T, extra string) *node {
	return startNode(t, nodeOpts{grace: "2s", killWait: "1s", unkillableAfter: "1s",
		teardown: fmt.Sprintf("foreign_cgroups = [%q, \"freezer:/gwtest-*\"]\n", filepath.Join(cgrouptest.Mount(t), "gwtest-*")) + extra})
}

// 2. An observed v2 cgroup that empties before E + G: released, no DOWN, no
// signal. One that stays populated: DOWN at E + G naming its process.
func TestJobCgroupV2(t *testing.T) {
	t.Run("empties", func(t *testing.T) {
		n := foreignNode(t, "")
		cg := cgrouptest.TempRoot(t)
		task := cgrouptest.StartIn(t, cg, "sleep", "1")
		e := time.Now().Add(time.Second)
		if _, stderr, code := n.cli("job", "start", "--job", "2", "--expiration", unixArg(e), "--cgroup", cg); code != 0 {
			t.Fatalf("job start: %d %s", code, stderr)
		}
		if j := n.status().Jobs[0]; len(j.Processes) != 1 || j.Processes[0] != task.Process.Pid {
			t.Fatalf("status lists %v, want the job's task %d", j.Processes, task.Process.Pid)
		}
		st := n.waitFor("released by its cgroup's emptying", 5*time.Second, func(st api.Status) bool { return st.Jobs[0].Phase == api.PhaseReleased })
		if j := st.Jobs[0]; j.EndedBy != "cgroup" || j.Outcome != "clean" {
			t.Fatalf("released: %+v", j)
		}
		// Past E + G: a witness job whose E is 1 s after this one's E + G
		// turns the node to teardown then. Its timer falls due after the
		// released job's deadline would have, so once the node is seen in
		// teardown, a deadline still armed would have put it DOWN.
		w := e.Add(3 * time.Second)
		if _, stderr, code := n.cli("job", "start", "--job", "3", "--expiration", unixArg(w), "--grace", "1h"); code != 0 {
			t.Fatalf("job start (witness): %d %s", code, stderr)
		}
		st = n.waitFor("the witness's E, past E + G", 20*time.Second, func(st api.Status) bool { return st.State != api.StateUp })
		if st.State != api.StateTeardown || st.FreeAt == nil || !st.FreeAt.Equal(w.Add(time.Hour)) || strings.Contains(st.Reason, "job 2") {
			t.Fatalf("state %s after E + G (free at %v, want the witness's deadline %v): %q", st.State, st.FreeAt, w.Add(time.Hour), st.Reason)
		}
		for _, j := range st.Jobs {
			if j.ID == "2" && j.Phase != api.PhaseReleased {
				t.Fatalf("after E + G: %+v, want job 2 released", j)
			}
		}
		if strings.Contains(n.logs.String(), `"msg":"escalation"`) {
			t.Fatalf("a signal was sent:\n%s", n.logs)
		}
	})
	t.Run("stays populated", func(t *testing.T) {
		n := foreignNode(t, "")
		fs := hangfs.Start(t)
		cg := cgrouptest.TempRoot(t)
		task := cgrouptest.StartIn(t, cg, "cat", fs.Path("hang"))
		if err := fs.WaitHungReads(1); err != nil {
			t.Fatal(err)
		}
		e := time.Now().Add(time.Second)
		if _, stderr, code := n.cli("job", "start", "--job", "41", "--expiration", unixArg(e), "--cgroup", "0::"+strings.TrimPrefix(cg, cgrouptest.Mount(t))); code != 0 {
			t.Fatalf("job start: %d %s", code, stderr)
		}
		d := e.Add(2 * time.Second)
		at, st := n.downAt(10 * time.Second)
		if at.Before(d) || at.After(d.Add(time.Second)) {
			t.Fatalf("down at E + G %+.3fs", at.Sub(d).Seconds())
		}
		st = n.waitFor("the reason names the job's task", 5*time.Second, func(st api.Status) bool {
			return strings.Contains(st.Reason, fmt.Sprintf("pid %d cat", task.Process.Pid))
		})
		if !strings.HasPrefix(st.Reason, "job 41 not ended by its deadline (E + 2s): ") || !strings.Contains(st.Reason, "request_wait_answer") {
			t.Fatalf("reason %q", st.Reason)
		}
		rs := n.reports()
		if len(rs) == 0 || !rs[0].NotEnded || len(rs[0].Processes) == 0 || rs[0].Processes[0].PID != task.Process.Pid {
			t.Fatalf("report: %+v", rs)
		}
		// signal_foreign is off: the exec system's task got no signal.
		if strings.Contains(n.logs.String(), `"processes":1,"signal":"SIGTERM"`) {
			t.Fatalf("the foreign task was signalled:\n%s", n.logs)
		}
		fs.Stop()
		n.waitFor("released once the task is gone", 10*time.Second, func(st api.Status) bool { return st.Jobs[0].Phase == api.PhaseReleased })
	})
	t.Run("refused", func(t *testing.T) {
		n := startNode(t, nodeOpts{}) // the default allow-list: Slurm's cgroups only
		cg := cgrouptest.TempRoot(t)
		_, stderr, code := n.cli("job", "start", "--job", "3", "--expiration", "0", "--cgroup", cg)
		if code != 1 || !strings.Contains(stderr, "not in the allow-list") || !strings.Contains(stderr, "freezer:/slurm*") {
			t.Fatalf("exit %d stderr %q; want a refusal naming the allow-list", code, stderr)
		}
		if st := n.status(); len(st.Jobs) != 0 {
			t.Fatalf("refused registration left %+v", st.Jobs)
		}
	})
}

// 3b. On pure cgroup v2 an exec system creates the job's cgroup after the
// registration: Slurm's cgroup/v2 plugin makes
// system.slice/slurmstepd.scope/job_<id> when the first step starts, after
// the Prolog that registers the job; Flux's sdexec starts the job shell as a
// transient unit of the flux user's systemd, every level of whose cgroup may
// be new. The registration is accepted (the allow-list still applies), the
// agent observes the cgroup within a second of its creation (inotify on
// the nearest existing ancestor, no polling), and its emptying ends the job.
func TestJobCgroupV2CreatedLater(t *testing.T) {
	for _, tc := range []struct {
		name   string
		levels []string // to the job's cgroup, as registered
		task   []string // below it, where the task runs
	}{
		// slurmstepd makes job_<id>, then the step's task cgroup in it.
		{"slurm cgroup/v2", []string{"system.slice", "slurmstepd.scope", "job_52"}, []string{"step_0", "user", "task_0"}},
		// The job shell is the unit's process (flux-core's bulk-exec names
		// the unit <imp-shell|shell>-<rank>-<f58 id>.service).
		{"flux sdexec", []string{"user.slice", "user-981.slice", "user@981.service", "app.slice", "imp-shell-0-f2wpPL3uC9.service"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := foreignNode(t, "")
			base := cgrouptest.TempRoot(t)
			cg := filepath.Join(append([]string{base}, tc.levels...)...)
			name := "0::" + strings.TrimPrefix(cg, cgrouptest.Mount(t))
			if _, stderr, code := n.cli("job", "start", "--job", "52", "--expiration", unixArg(time.Now().Add(time.Hour)), "--cgroup", name); code != 0 {
				t.Fatalf("job start with a cgroup not created yet: exit %d %s", code, stderr)
			}
			if j := n.status().Jobs[0]; j.Phase != api.PhaseRunning || j.Foreign != cg || len(j.Processes) != 0 {
				t.Fatalf("registered: %+v, want running, observing %s, no process", j, cg)
			}
			dir := base
			var created time.Time
			for i, l := range append(slices.Clone(tc.levels), tc.task...) {
				dir = filepath.Join(dir, l)
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if i == len(tc.levels)-1 {
					created = time.Now()
				}
			}
			task := cgrouptest.StartIn(t, dir, "sleep", "300")
			n.waitFor("the job's task listed", 5*time.Second, func(st api.Status) bool {
				return len(st.Jobs) == 1 && slices.Contains(st.Jobs[0].Processes, task.Process.Pid)
			})
			if d := time.Since(created); d > time.Second {
				t.Errorf("the job's cgroup observed %v after its creation, want within 1 s", d)
			}
			t.Logf("observed %v after the creation", time.Since(created).Round(time.Millisecond))
			// Watched, not polled: the poll that stands in for a watch
			// that cannot be made would also see it, within a second.
			if strings.Contains(n.logs.String(), "cannot watch cgroup") {
				t.Errorf("the agent polls the job's cgroup instead of watching it:\n%s", n.logs)
			}
			task.Process.Kill()
			st := n.waitFor("released by its cgroup's emptying", 5*time.Second, func(st api.Status) bool { return st.Jobs[0].Phase == api.PhaseReleased })
			if j := st.Jobs[0]; j.EndedBy != "cgroup" || j.Outcome != "clean" {
				t.Fatalf("released: %+v, want ended by its cgroup, clean", j)
			}
		})
	}
	// Bounded: jobs whose cgroups wait in the same directory share one
	// inotify watch (the registered jobs are capped), and a job released
	// before its cgroup ever appeared leaves no watch behind.
	t.Run("bounded", func(t *testing.T) {
		n := foreignNode(t, "")
		scope := filepath.Join(cgrouptest.TempRoot(t), "system.slice", "slurmstepd.scope")
		if err := os.MkdirAll(scope, 0o755); err != nil {
			t.Fatal(err)
		}
		before := inotifyWatches(t, n.cmd.Process.Pid)
		ids := []string{"61", "62", "63"}
		for _, id := range ids {
			name := "0::" + strings.TrimPrefix(filepath.Join(scope, "job_"+id), cgrouptest.Mount(t))
			if _, stderr, code := n.cli("job", "start", "--job", id, "--expiration", unixArg(time.Now().Add(time.Hour)), "--cgroup", name); code != 0 {
				t.Fatalf("job start %s: exit %d %s", id, code, stderr)
			}
		}
		if got := inotifyWatches(t, n.cmd.Process.Pid) - before; got != 1 {
			t.Errorf("three jobs awaiting their cgroups in one directory hold %d more inotify watches, want 1", got)
		}
		for _, id := range ids {
			if _, stderr, code := n.cli("job", "end", "--job", id); code != 0 {
				t.Fatalf("job end %s: exit %d %s", id, code, stderr)
			}
		}
		n.waitFor("all three released", 5*time.Second, func(st api.Status) bool {
			return len(st.Jobs) == 3 && !slices.ContainsFunc(st.Jobs, func(j api.Job) bool { return j.Phase != api.PhaseReleased })
		})
		if got := inotifyWatches(t, n.cmd.Process.Pid); got != before {
			t.Errorf("%d inotify watches after the jobs were released, %d before they were registered", got, before)
		}
	})
	t.Run("not allowed", func(t *testing.T) {
		n := startNode(t, nodeOpts{}) // the default allow-list: Slurm's cgroups only
		cg := filepath.Join(cgrouptest.TempRoot(t), "system.slice", "job_53")
		_, stderr, code := n.cli("job", "start", "--job", "53", "--expiration", "0", "--cgroup", cg)
		if code != 1 || !strings.Contains(stderr, "not in the allow-list") {
			t.Fatalf("exit %d stderr %q; want a refusal naming the allow-list", code, stderr)
		}
	})
}

// 4 (on a real v1 hierarchy). Its job's processes are listed, its emptying
// seen within 1 s.
func TestJobCgroupV1(t *testing.T) {
	n := foreignNode(t, "")
	dir, rel := cgrouptest.TempV1(t, "freezer")
	step := filepath.Join(dir, "step_0")
	e := time.Now().Add(time.Hour)
	// Registered before the exec system made the job's cgroup, as Slurm's
	// Prolog does.
	if _, stderr, code := n.cli("job", "start", "--job", "4", "--expiration", unixArg(e), "--cgroup", "freezer:"+rel); code != 0 {
		t.Fatalf("job start: %d %s", code, stderr)
	}
	if err := os.Mkdir(step, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd, done := cgrouptest.StartWatched(t, step, "sleep", "30")
	n.waitFor("the task listed", 2*time.Second, func(st api.Status) bool {
		j := st.Jobs[0]
		return len(j.Processes) == 1 && j.Processes[0] == cmd.Process.Pid && j.ForeignName == "freezer:"+rel
	})
	cmd.Process.Kill()
	<-done
	gone := time.Now()
	st := n.waitFor("released", 3*time.Second, func(st api.Status) bool { return st.Jobs[0].Phase == api.PhaseReleased })
	if seen := st.Jobs[0].Ended.Sub(gone); seen > 1100*time.Millisecond {
		t.Fatalf("emptying seen %v after the task died, want within 1 s", seen)
	}
	if st.Jobs[0].EndedBy != "cgroup" {
		t.Fatalf("ended_by %q", st.Jobs[0].EndedBy)
	}
}

// 3 (with a real command). A time limit extended in the exec system only:
// the expiration command finds it, and the DOWN comes at the new E + G.
func TestExpirationCommandExtends(t *testing.T) {
	dir := t.TempDir()
	answer := filepath.Join(dir, "E")
	script := filepath.Join(dir, "expiration.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"job $1\" >> "+dir+"/asked\ncat "+answer+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, nodeOpts{grace: "1s", teardown: fmt.Sprintf("expiration_command = [%q, \"{job}\"]\nexpiration_timeout = \"2s\"", script)})
	e := time.Now().Add(time.Second)
	e2 := e.Add(3 * time.Second)
	os.WriteFile(answer, []byte(unixArg(e2)+"\n"), 0o644)
	if _, stderr, code := n.cli("job", "start", "--job", "7", "--expiration", unixArg(e)); code != 0 {
		t.Fatalf("job start: %d %s", code, stderr)
	}
	at, st := n.downAt(15 * time.Second)
	d2 := e2.Add(time.Second)
	if at.Before(d2) || at.After(d2.Add(1500*time.Millisecond)) {
		t.Fatalf("down %+.3fs from the new E + G (the old one was %v earlier)", at.Sub(d2).Seconds(), d2.Sub(e.Add(time.Second)))
	}
	asked, _ := os.ReadFile(filepath.Join(dir, "asked"))
	if got := strings.Count(string(asked), "job 7"); got != 2 {
		t.Fatalf("asked %d times (%q), want once per expiration", got, asked)
	}
	if !strings.Contains(st.Reason, "no end reported") {
		t.Fatalf("reason %q", st.Reason)
	}
	if !strings.Contains(n.logs.String(), "the job's expiration moved") {
		t.Fatalf("no log of the move:\n%s", n.logs)
	}
}

// Bad answers of the expiration command: each is logged, and the deadline
// holds.
func TestExpirationCommandFailsOrHangs(t *testing.T) {
	for name, body := range map[string]string{
		"fails":   "echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1",
		"hangs":   "exec sleep 60",
		"garbage": "echo 'TimeLimit=UNLIMITED'",
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			script := filepath.Join(dir, "expiration.sh")
			os.WriteFile(script, []byte("#!/bin/sh\n"+body+"\n"), 0o755)
			n := startNode(t, nodeOpts{grace: "1s", teardown: fmt.Sprintf("expiration_command = [%q, \"{job}\"]\nexpiration_timeout = \"1s\"", script)})
			e := time.Now().Add(500 * time.Millisecond)
			if _, stderr, code := n.cli("job", "start", "--job", "8", "--expiration", unixArg(e)); code != 0 {
				t.Fatalf("job start: %d %s", code, stderr)
			}
			at, _ := n.downAt(10 * time.Second)
			if late := at.Sub(e.Add(time.Second)); late < 0 || late > 2500*time.Millisecond {
				t.Fatalf("down %+.3fs from E + G, want within the command's timeout", late.Seconds())
			}
			if !strings.Contains(n.logs.String(), "expiration command failed; the deadline holds") {
				t.Fatalf("no log line for the failure:\n%s", n.logs)
			}
		})
	}
}

// 6. kill -9 of the agent while a registered job still runs: the deadline
// holds after the restart.
func TestAgentCrashWhileJobRuns(t *testing.T) {
	n := startNode(t, nodeOpts{grace: "2s"})
	e := time.Now().Add(time.Second)
	if _, stderr, code := n.cli("job", "start", "--job", "6", "--expiration", unixArg(e)); code != 0 {
		t.Fatalf("job start: %d %s", code, stderr)
	}
	n.crash()
	// Nothing but the wall clock marks the instant E + G.
	// not a wait: the scenario is an agent away while the clock passes E + G
	time.Sleep(time.Until(e.Add(2500 * time.Millisecond)))
	n.start()
	at, st := n.downAt(5 * time.Second)
	if late := at.Sub(e.Add(2 * time.Second)); late > 2*time.Second {
		t.Fatalf("down %.1fs after E + G", late.Seconds())
	}
	if !strings.Contains(st.Reason, "job 6: no end reported") {
		t.Fatalf("reason %q", st.Reason)
	}
}

// inotifyWatches counts the inotify watches that process pid holds, over
// all its inotify instances (/proc/PID/fdinfo).
func inotifyWatches(t *testing.T, pid int) int {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if target, _ := os.Readlink(filepath.Join(dir, fd.Name())); target != "anon_inode:inotify" {
			continue
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd.Name()))
		if err != nil {
			t.Fatal(err)
		}
		n += strings.Count(string(data), "inotify wd:")
	}
	return n
}
