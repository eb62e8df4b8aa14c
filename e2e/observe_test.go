package e2e

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/jobname"
	aggapi "github.com/gracewatch/gracewatch/aggregator/api"
)

// TestObserveMode is issue 17's first proof with real parts: an agent and
// an aggregator on loopback in observe mode, a real cgroup and epilogue,
// and a real FUSE mount (hangfs-serve) whose read never answers:
//
//  1. the hung epilogue passes its deadline: nothing signals it (its
//     /proc/PID/status has no signal pending, for well past kill_wait and
//     unkillable_after), the node is not latched, no actuator runs, and
//     the node is served schedulable, with its would-be drain (the
//     diagnosis naming the hung mount, and the deadline at which it would
//     have been drained) in /v1/nodes and /metrics;
//  2. the FUSE server comes back: the would-be drain clears;
//  3. the same cluster, restarted in enforce mode, drains the next hung
//     teardown: the agent signals it (the same /proc check now sees the
//     signal pending), latches the node, and the on="down" actuator runs.
//
// (The promtool test of GracewatchWouldDrain is packaging/alerts_test.go;
// a mixed cluster and the aggregator's own observe mode are proved at the
// aggregator: aggregator/observe_test.go.)
func TestObserveMode(t *testing.T) {
	c := newCluster(t)
	actions := filepath.Join(c.dir, "actions.log")
	c.mode = "observe"
	c.killWait, c.unkillableAfter = "1s", "1s"
	c.aggConf = fmt.Sprintf(`
[[actuator]]
on = "down"
command = ["sh", "-c", "echo \"down $0\" >> %s", "{node}"]
timeout = "5s"
`, actions)
	agg := c.addAggregator("agg-1")
	a := c.addAgent("n1")
	nodeOf := func() aggapi.Node {
		var n aggapi.Node
		if err := json.Unmarshal([]byte(get(t, agg.url+"/v1/nodes/n1", c.token)), &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitFor(t, "n1 up, in observe mode", 30*time.Second, func() bool {
		n := nodeOf()
		return n.State == "up" && n.Mode == "observe"
	})
	var cc aggapi.ClusterConfig
	if err := json.Unmarshal([]byte(get(t, agg.url+"/v1/config", c.token)), &cc); err != nil || cc.Mode != "observe" {
		t.Errorf("/v1/config: mode %q (%v), want observe", cc.Mode, err)
	}

	// 1. A hung epilogue under observe mode.
	fs := startHangfs(t, filepath.Join(c.dir, "fs1"))
	exp := time.Now().Add(time.Hour).Format(time.RFC3339)
	if out, code := a.cli("job", "start", "--job", "1", "--expiration", exp); code != 0 {
		t.Fatalf("job start: %s", out)
	}
	epi := a.epilog("1", "cat", fs.file())
	fs.waitRead(10 * time.Second)
	pid := hungPID(t, a, "1")
	var n aggapi.Node
	waitFor(t, "n1's would-be drain, diagnosed", 30*time.Second, func() bool {
		n = nodeOf()
		return n.WouldDrain != nil && n.WouldDrain.Mountpoint == fs.mnt
	})
	wd := n.WouldDrain
	if len(n.Teardowns) != 1 || n.Teardowns[0].Phase != "overdue" || n.Teardowns[0].Deadline == nil {
		t.Fatalf("teardowns %+v, want job 1 overdue", n.Teardowns)
	}
	if deadline := *n.Teardowns[0].Deadline; wd.At == nil || !wd.At.Equal(deadline) {
		t.Errorf("would drain at %v, want the teardown's deadline %v", wd.At, deadline)
	}
	if wd.FSType != "fuse.hangfs" || !strings.Contains(wd.Reason, "job 1") || len(wd.Jobs) != 1 || wd.Jobs[0] != "1" {
		t.Errorf("would_drain %+v: want job 1, its diagnosis naming the hung fuse.hangfs mount", wd)
	}
	t.Logf("would drain: %+v", *wd)
	metrics := get(t, agg.url+"/metrics", c.token)
	for _, want := range []string{"gracewatch_aggregator_would_drain_nodes 1", `gracewatch_aggregator_node_would_drain_timestamp_seconds{node="n1"}`,
		`gracewatch_aggregator_mode{mode="observe"} 1`, `gracewatch_aggregator_nodes_by_mode{mode="observe"} 1`, "gracewatch_aggregator_modes_mixed 0"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
	// Well past kill_wait + unkillable_after after the deadline, nothing
	// has changed: the process is there, no signal is pending, nothing is
	// latched or drained, and the node is schedulable.
	deadline := wd.At.Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if sig := pendingSignals(t, pid); sig != 0 {
			t.Fatalf("observe mode: the hung process %d has signals pending (%#x)", pid, sig)
		}
		if st := a.status(); st.State != "teardown" || st.Jobs[0].Escalation != "" {
			t.Fatalf("observe mode: the agent is %s, job 1 escalation %q", st.State, st.Jobs[0].Escalation)
		}
		if n := nodeOf(); !n.Schedulable || n.State != "teardown" || n.WouldDrain == nil {
			t.Fatalf("observe mode: n1 served %s (schedulable %t, would_drain %v)", n.State, n.Schedulable, n.WouldDrain)
		}
		// not a wait: the checks repeat through the window (observe mode arms no timer whose end it would report)
		time.Sleep(200 * time.Millisecond)
	}
	if got := actionLines(t, actions, "down "); len(got) != 0 {
		t.Errorf("observe mode ran the actuator: %q", got)
	}
	if !strings.Contains(a.logs.String(), "would drain (observe mode)") {
		t.Error("the agent did not log its would-be drain")
	}

	// 2. The FUSE server comes back: the reader ends by itself, the
	// teardown is released, the would-be drain clears.
	if err := fs.stop(); err != nil {
		t.Fatal(err)
	}
	epi.Wait()
	waitFor(t, "n1 up, no would-be drain", 20*time.Second, func() bool {
		n := nodeOf()
		return n.State == "up" && n.WouldDrain == nil
	})

	// 3. The same cluster in enforce mode: the next hung teardown drains.
	for _, p := range []struct {
		stop, start func()
		config      string
	}{{agg.stop, func() { agg.start(); agg.waitReady() }, agg.config}, {a.stop, func() { a.start(); a.waitAPI() }, a.config}} {
		p.stop()
		setMode(t, p.config, "enforce")
		p.start()
	}
	waitFor(t, "n1 up, in enforce mode", 30*time.Second, func() bool {
		n := nodeOf()
		return n.State == "up" && n.Mode == "enforce"
	})
	fs2 := startHangfs(t, filepath.Join(c.dir, "fs2"))
	if out, code := a.cli("job", "start", "--job", "2", "--expiration", exp); code != 0 {
		t.Fatalf("job start: %s", out)
	}
	epi2 := a.epilog("2", "cat", fs2.file())
	fs2.waitRead(10 * time.Second)
	pid2 := hungPID(t, a, "2")
	waitFor(t, "n1 down and drained", 30*time.Second, func() bool {
		return nodeOf().State == "down" && len(actionLines(t, actions, "down n1")) == 1
	})
	waitFor(t, "the signals the agent sent, pending on the hung process", 10*time.Second, func() bool {
		return pendingSignals(t, pid2)&(1<<(9-1)) != 0 // SIGKILL, which it cannot take in D
	})
	if err := fs2.stop(); err != nil {
		t.Fatal(err)
	}
	epi2.Wait()
}

// hungPID is the pid of the one process in job's cgroup tree, the hung
// reader its epilogue ran.
func hungPID(t testing.TB, a *agent, job string) int {
	t.Helper()
	var pid int
	waitFor(t, "job "+job+"'s process", 10*time.Second, func() bool {
		var pids []string
		filepath.WalkDir(filepath.Join(a.root, jobname.Cgroup(job)), func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.Name() == "cgroup.procs" {
				data, _ := os.ReadFile(path)
				pids = append(pids, strings.Fields(string(data))...)
			}
			return nil
		})
		if len(pids) != 1 {
			return false
		}
		var err error
		pid, err = strconv.Atoi(pids[0])
		return err == nil
	})
	return pid
}

// pendingSignals is the signals pending on pid, for its thread or its
// thread group (SigPnd | ShdPnd of /proc/PID/status).
func pendingSignals(t testing.TB, pid int) uint64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("the hung process %d: %v", pid, err)
	}
	var sig uint64
	for _, line := range strings.Split(string(data), "\n") {
		k, v, _ := strings.Cut(line, ":")
		if k == "SigPnd" || k == "ShdPnd" {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatalf("/proc/%d/status %s: %v", pid, k, err)
			}
			sig |= m
		}
	}
	return sig
}

// setMode rewrites the mode line of a configuration file.
func setMode(t testing.TB, path, mode string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitN(string(data), "\n", 2)
	if !strings.HasPrefix(lines[0], "mode = ") {
		t.Fatalf("%s does not begin with its mode: %q", path, lines[0])
	}
	if err := os.WriteFile(path, []byte(fmt.Sprintf("mode = %q\n%s", mode, lines[1])), 0o600); err != nil {
		t.Fatal(err)
	}
}
