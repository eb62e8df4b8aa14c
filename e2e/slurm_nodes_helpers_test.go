package e2e

// Helpers of the several-node Slurm tests (slurm_plan_test.go): four real
// slurmd, each in a network namespace of its own with its own address, one
// slurmctld in a hub namespace that holds the bridge (after
// /work/shared/notes/slurm-multi-node.md), all sharing the host's file
// system and munge's socket; one gracewatch agent per node and the
// aggregators on loopback, their Slurm commands entering the hub's
// namespace. Nothing is added to the root namespace's network.

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// slurmNodesAddr is the hub's address; node k has .10+k. 198.18.0.0/15 is
// reserved for benchmarks (RFC 2544) and exists only inside the test's
// namespaces.
const slurmNodesHub = "198.18.0.1"

// slurmNodes is a Slurm of several nodes on this machine.
type slurmNodes struct {
	*slurmSite
	names []string
	ns    map[string]string // node -> network namespace
	inHub string            // a script that runs its arguments in the hub's namespace
}

// slurmNodesConfig is what changes between the tests' clusters.
type slurmNodesConfig struct {
	Nodes int
	// Epilog is Slurm's Epilog= (absolute).
	Epilog string
	// BfResolution is SchedulerParameters' bf_resolution in seconds.
	BfResolution int
	// PrologEpilogTimeout is Slurm's, in seconds (0: unset, Slurm waits
	// for the epilogue forever).
	PrologEpilogTimeout int
}

// newSlurmNodes makes the namespaces and the site's folder; start runs the
// daemons. Everything is removed when the test ends.
func newSlurmNodes(t *testing.T, nodes int) *slurmNodes {
	t.Helper()
	requireSlurm(t)
	requireNetns(t)
	s := &slurmNodes{slurmSite: newSlurmSite(t), ns: map[string]string{}}
	var b [3]byte
	_, _ = rand.Read(b[:])
	prefix := "gws-" + hex.EncodeToString(b[:])
	hub := prefix + "-hub"

	// Registered first, so that it runs last, once every process in the
	// namespaces has ended.
	var made []string
	t.Cleanup(func() {
		for i := len(made) - 1; i >= 0; i-- {
			ns := made[i]
			if out, err := netnsRun("ip", "netns", "pids", ns); err == nil {
				for _, f := range strings.Fields(out) {
					if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
						t.Errorf("process %d was still in namespace %s at cleanup; killing it", pid, ns)
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			}
			if ns == hub {
				_, _ = netnsRun("ip", "-n", ns, "link", "del", "br0")
			}
			if _, err := netnsRun("ip", "netns", "del", ns); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	must := func(args ...string) {
		t.Helper()
		if out, err := netnsRun(args[0], args[1:]...); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	must("ip", "netns", "add", hub)
	made = append(made, hub)
	must("ip", "-n", hub, "link", "set", "lo", "up")
	must("ip", "-n", hub, "link", "add", "br0", "type", "bridge")
	must("ip", "-n", hub, "addr", "add", slurmNodesHub+"/24", "dev", "br0")
	must("ip", "-n", hub, "link", "set", "br0", "up")
	for k := 1; k <= nodes; k++ {
		name := fmt.Sprintf("n%d", k)
		ns := prefix + "-" + name
		must("ip", "netns", "add", ns)
		made = append(made, ns)
		veth := "v-" + name
		must("ip", "-n", hub, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
		must("ip", "-n", hub, "link", "set", veth, "master", "br0", "up")
		must("ip", "-n", ns, "link", "set", "lo", "up")
		must("ip", "-n", ns, "addr", "add", fmt.Sprintf("198.18.0.%d/24", 10+k), "dev", "eth0")
		must("ip", "-n", ns, "link", "set", "eth0", "up")
		s.names = append(s.names, name)
		s.ns[name] = ns
	}
	// nsenter, not ip netns exec: the latter remounts /sys, and slurmd
	// then finds no cgroup file system.
	s.netns = hub
	s.inHub = s.path("in-hub.sh")
	text := "#!/bin/sh\nexec nsenter --net=/var/run/netns/" + hub + " \"$@\"\n"
	if err := os.WriteFile(s.inHub, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
	return s
}

// start writes slurm.conf, starts munged, slurmctld in the hub and one
// slurmd per node in its namespace, and waits (at most 30 s) until every
// node is idle. They are stopped by pid when the test ends.
func (s *slurmNodes) start(cfg slurmNodesConfig) {
	t := s.t
	t.Helper()
	type nodeLine struct{ Name, Addr string }
	var lines []nodeLine
	for k, name := range s.names {
		lines = append(lines, nodeLine{name, fmt.Sprintf("198.18.0.%d", 11+k)})
	}
	writeTemplate(t, "slurm-nodes.conf", s.conf, 0o644, struct {
		slurmNodesConfig
		Dir, Host, HubAddr, List string
		Nodes                    []nodeLine
	}{cfg, s.dir, s.host, slurmNodesHub, fmt.Sprintf("n[1-%d]", len(s.names)), lines})
	s.startMunge()
	enter := func(ns string) []string { return []string{"nsenter", "--net=/var/run/netns/" + ns} }
	ctld, _ := lookSlurm("slurmctld")
	s.daemons = append(s.daemons, startDaemon(t, "slurmctld", nil, append(enter(s.netns), ctld, "-D", "-f", s.conf)...))
	slurmd, _ := lookSlurm("slurmd")
	for _, name := range s.names {
		if err := os.MkdirAll(s.path("spool/d-"+name), 0o755); err != nil {
			t.Fatal(err)
		}
		s.daemons = append(s.daemons, startDaemon(t, "slurmd-"+name, nil, append(enter(s.ns[name]), slurmd, "-D", "-N", name, "-f", s.conf)...))
	}
	for _, name := range s.names {
		s.waitNodeState(name, "idle after start", 30*time.Second, func(state, _ string) bool { return state == "idle" })
	}
}

// slurmRes is one of Slurm's reservations (scontrol show reservation).
type slurmRes struct {
	Name, Nodes, Flags string
	Start, End         time.Time
}

// reservations lists Slurm's reservations.
func (s *slurmNodes) reservations() ([]slurmRes, error) {
	out, err := s.run("scontrol", "show", "reservation", "-o")
	if err != nil {
		return nil, err
	}
	var list []slurmRes
	for _, line := range strings.Split(out, "\n") {
		var r slurmRes
		for _, f := range strings.Fields(line) {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "ReservationName":
				r.Name = v
			case "Nodes":
				r.Nodes = v
			case "Flags":
				r.Flags = v
			case "StartTime":
				r.Start, _ = time.ParseInLocation("2006-01-02T15:04:05", v, time.Local)
			case "EndTime":
				r.End, _ = time.ParseInLocation("2006-01-02T15:04:05", v, time.Local)
			}
		}
		if r.Name != "" {
			list = append(list, r)
		}
	}
	return list, nil
}

// gracewatchReservations lists the reservations named gracewatch_*.
func (s *slurmNodes) gracewatchReservations() []slurmRes {
	s.t.Helper()
	list, err := s.reservations()
	if err != nil {
		s.t.Fatal(err)
	}
	var out []slurmRes
	for _, r := range list {
		if strings.HasPrefix(r.Name, "gracewatch_") {
			out = append(out, r)
		}
	}
	return out
}

// waitReservations polls (at most timeout) until cond holds for the
// gracewatch_* reservations, and returns them.
func (s *slurmNodes) waitReservations(what string, timeout time.Duration, cond func([]slurmRes) bool) []slurmRes {
	s.t.Helper()
	list, _, ok := testutil.PollRead(timeout, func() ([]slurmRes, error) { return s.gracewatchReservations(), nil }, cond)
	if !ok {
		s.t.Fatalf("slurm: reservations not %s within %v: %+v", what, timeout, list)
	}
	return list
}

// expectedStartTime is squeue --start of a pending job as a time (zero for
// N/A or an error) and its state.
func (s *slurmNodes) expectedStartTime(job string) (time.Time, string) {
	out, err := s.run("squeue", "-h", "-j", job, "-o", "%S|%T")
	if err != nil {
		return time.Time{}, "error"
	}
	start, state, _ := strings.Cut(strings.TrimSpace(out), "|")
	at, err := time.ParseInLocation("2006-01-02T15:04:05", start, time.Local)
	if err != nil {
		return time.Time{}, state
	}
	return at, state
}

// jobState is squeue's state of job ("" once it has left).
func (s *slurmNodes) jobState(job string) string {
	out, err := s.run("squeue", "-h", "-j", job, "-o", "%T")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

// epilogs writes the real epilogue (it hangs on a node marked hang-NODE
// until release-JOB) and Slurm's Epilog=, the shipped wrapper pointed at
// the node's agent under agentDir; it returns the Epilog= path.
func (s *slurmNodes) epilogs(agentDir string) string {
	s.t.Helper()
	real := s.path("epilog.real")
	writeTemplate(s.t, "epilog-slow.real", real, 0o755, map[string]string{"Dir": s.dir, "Starts": s.path("epilog-starts")})
	wrapper := s.writeEpilogWrapper(real)
	p := s.path("epilog.sh")
	writeTemplate(s.t, "epilog-nodes.sh", p, 0o755, map[string]string{"AgentDir": agentDir, "Wrapper": wrapper})
	return p
}

// hang makes the epilogues of node wait for their release from now on.
func (s *slurmNodes) hang(node string) {
	s.t.Helper()
	if err := os.WriteFile(s.path("hang-"+node), nil, 0o644); err != nil {
		s.t.Fatal(err)
	}
}

// unhang stops making node's epilogues wait (the ones waiting still do).
func (s *slurmNodes) unhang(node string) { os.Remove(s.path("hang-" + node)) }

// release ends the wait of job's epilogue.
func (s *slurmNodes) release(job string) {
	s.t.Helper()
	if err := os.WriteFile(s.path("release-"+job), nil, 0o644); err != nil {
		s.t.Fatal(err)
	}
}

// endJobs ends every wait of an epilogue, now and from now on, cancels
// every job and waits (at most 30 s) until none is left: the cleanup's
// first step, since a job's processes stay in its node's namespace and a
// slurmd whose epilogue runs does not stop on SIGTERM.
func (s *slurmNodes) endJobs() {
	os.WriteFile(s.path("release-all"), nil, 0o644)
	if _, err := s.run("scancel", "--user", "root"); err != nil {
		s.t.Errorf("cleanup: %v", err)
	}
	out, err, ok := testutil.PollRead(90*time.Second, func() (string, error) { return s.run("squeue", "-h", "-o", "%i %T") },
		func(out string) bool { return strings.TrimSpace(out) == "" })
	if !ok {
		s.t.Errorf("cleanup: jobs left after 90 s: %s %v", out, err)
	}
}

// slurmCommands returns the aggregator's [[actuator]] tables
// (packaging/examples/aggregator/actuator-slurm.toml) and, unless after is
// empty, its [reservations] table (reservations-slurm.toml, with after and
// a shorter interval), running copies of the shipped scripts inside the
// hub's namespace.
func (s *slurmNodes) slurmCommands(after string) string {
	s.t.Helper()
	act := s.path("slurm-actuator.sh")
	res := s.path("slurm-reservation.sh")
	for path, text := range map[string]string{act: actuatorScript(s.t, "aggregator/slurm-actuator.sh"), res: readExample(s.t, "aggregator/slurm-reservation.sh")} {
		if err := os.WriteFile(path, []byte(text), 0o755); err != nil {
			s.t.Fatal(err)
		}
	}
	text := "\n" + strings.ReplaceAll(readExample(s.t, "aggregator/actuator-slurm.toml"),
		`"/etc/gracewatch/slurm-actuator.sh"`, fmt.Sprintf("%q, %q", s.inHub, act))
	if after == "" || compareWithout(s.t, "reservations") {
		return text
	}
	plan := readExample(s.t, "aggregator/reservations-slurm.toml")
	for old, new := range map[string]string{
		`"/etc/gracewatch/slurm-reservation.sh"`: fmt.Sprintf("%q, %q", s.inHub, res),
		"\nafter = \"10s\"\n":                    fmt.Sprintf("\nafter = %q\ninterval = \"500ms\"\n", after),
	} {
		if strings.Count(plan, old) != 1 {
			s.t.Fatalf("reservations-slurm.toml holds %q %d times, want once", old, strings.Count(plan, old))
		}
		plan = strings.Replace(plan, old, new, 1)
	}
	return text + "\n" + plan
}

// epilogStartOf returns when job's real epilogue started on node, waiting
// at most timeout.
func (s *slurmNodes) epilogStartOf(job, node string, timeout time.Duration) time.Time {
	s.t.Helper()
	at, err := waitStamp(s.path("epilog-starts"), timeout, job, node)
	if err != nil {
		s.t.Fatalf("the epilogue of job %s on %s did not start within %v: %v\n%s", job, node, timeout, err,
			tailFile(s.path(filepath.Join("log", "slurmd-"+node+".log")), 3000))
	}
	return at
}
