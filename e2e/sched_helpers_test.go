package e2e

// Helpers the Slurm and Flux tests share: a node's state as the scheduler
// shows it, a site's folder, and what gracewatch says of a job there (the
// agent's status and deadline, a process in the job's cgroups, the
// aggregator's actuator runs and its CLI).

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/internal/testutil"
)

// schedNode is a node's state and reason as a scheduler's own tool shows
// them (Slurm's scontrol, Flux's resource status).
type schedNode struct{ state, reason string }

// pollSchedNode reads a node's state and reason with read (at most
// timeout, testutil.PollRead) until cond holds of them; it returns the
// last read, whether cond held, and the last read's error.
func pollSchedNode(timeout time.Duration, read func() (state, reason string, err error),
	cond func(state, reason string) bool) (schedNode, bool, error) {
	last, err, ok := testutil.PollRead(timeout, func() (schedNode, error) {
		state, reason, err := read()
		return schedNode{state, reason}, err
	}, func(n schedNode) bool { return cond(n.state, n.reason) })
	return last, ok, err
}

// siteDir makes a scheduler site's folder in /tmp (mode 0755: its daemons
// and jobs run as other users too), removed when the test ends unless
// something is still mounted in it: a FUSE mount left behind hangs or fails
// RemoveAll, so the folder is left and the test says so.
func siteDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if m := mountsUnder(dir); len(m) > 0 {
			t.Errorf("not removing %s: still mounted %v", dir, m)
			return
		}
		os.RemoveAll(dir)
	})
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// mountsUnder lists the mount points at or under dir (/proc/self/mountinfo).
func mountsUnder(dir string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := strings.ReplaceAll(f[4], `\040`, " ")
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out
}

// agentStatus is `nodeagent status --json` of agent a.
func agentStatus(t testing.TB, a *agent) api.Status {
	t.Helper()
	out, code := a.cli("status", "--json")
	var st api.Status
	if code != 0 {
		t.Fatalf("nodeagent status --json: exit %d: %s", code, out)
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("nodeagent status --json: %v\n%s", err, out)
	}
	return st
}

// jobDeadline waits (at most 30 s) until the agent has job in teardown, and
// returns the job.
func jobDeadline(t testing.TB, a *agent, job string) api.Job {
	t.Helper()
	var found api.Job
	if !testutil.Poll(30*time.Second, func() bool {
		for _, j := range agentStatus(t, a).Jobs {
			if j.ID == job && j.Deadline != nil {
				found = j
				return true
			}
		}
		return false
	}) {
		t.Fatalf("agent %s: job %s has no teardown deadline after 30 s: %+v", a.node, job, agentStatus(t, a).Jobs)
	}
	return found
}

// pidIn finds, in the agent's cgroups of job, a process named comm.
func pidIn(t testing.TB, a *agent, job, comm string) int {
	t.Helper()
	root := filepath.Join(a.root, "job-"+job)
	found := 0
	if !testutil.Poll(30*time.Second, func() bool {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.Name() != "cgroup.procs" || found != 0 {
				return nil
			}
			data, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(data)) {
				pid, _ := strconv.Atoi(f)
				// comm, never cmdline: reading a hung process's cmdline can block.
				c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
				if strings.TrimSpace(string(c)) == comm {
					found = pid
				}
			}
			return nil
		})
		return found != 0
	}) {
		t.Fatalf("no %s process in %s within 30 s", comm, root)
	}
	return found
}

// actuatorRuns counts the aggregator's successful runs of its on=on
// actuators (gracewatch_aggregator_actuator_runs_total, not its log lines:
// those are within each node's log budget); -1 when /metrics does not
// answer.
func actuatorRuns(g *aggregator, on string) int {
	resp, err := http.Get(g.url + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1
	}
	prefix := `gracewatch_aggregator_actuator_runs_total{on="` + on + `",result="success"} `
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			var v float64
			fmt.Sscanf(rest, "%g", &v)
			return int(v)
		}
	}
	return 0
}

// waitActuatorRuns waits (at most timeout) until the aggregator ran its
// on=on actuators n times.
func waitActuatorRuns(t testing.TB, g *aggregator, on string, n int, timeout time.Duration) {
	t.Helper()
	if !testutil.Poll(timeout, func() bool { return actuatorRuns(g, on) >= n }) {
		t.Fatalf("%s: %d on=%s actuator runs after %v, want %d", g.name, actuatorRuns(g, on), on, timeout, n)
	}
}

// aggregatorCLI runs `aggregator ARGS --url URL --token-file TOKEN`.
func aggregatorCLI(t testing.TB, c *cluster, g *aggregator, args ...string) string {
	t.Helper()
	args = append(args, "--url", g.url, "--token-file", filepath.Join(c.dir, "token"))
	out, err := exec.Command(bins.aggregator, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("aggregator %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
