package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// planGrace is the agents' G in the plan tests: long enough for several
// backfill passes (bf_interval=1) between the reservation and D.
const planGrace = 20 * time.Second

// startSlurmPlan runs four real slurmd in network namespaces, a gracewatch
// agent per node, and the named aggregators with the shipped Slurm
// actuators and, unless after is empty, the shipped reservations
// (reserved after that long).
func startSlurmPlan(t *testing.T, after string, aggs ...string) (*slurmNodes, *cluster, []*aggregator) {
	t.Helper()
	return startSlurmPlanGrace(t, after, planGrace, aggs...)
}

// startSlurmPlanGrace is startSlurmPlan with the agents' G.
func startSlurmPlanGrace(t *testing.T, after string, grace time.Duration, aggs ...string) (*slurmNodes, *cluster, []*aggregator) {
	t.Helper()
	s := newSlurmNodes(t, 4)
	// The aggregators' commands run scontrol, which needs SLURM_CONF.
	t.Setenv("SLURM_CONF", s.conf)
	c := newCluster(t)
	c.grace = grace.String()
	c.aggConf = s.slurmCommands(after)
	var gs []*aggregator
	for _, name := range aggs {
		gs = append(gs, c.addAggregator(name))
	}
	for _, n := range s.names {
		c.addAgent(n)
	}
	for _, n := range s.names {
		gs[0].waitNode(t, n, "up", 30*time.Second, func(nd node) bool { return nd.State == "up" })
	}
	s.start(slurmNodesConfig{Nodes: 4, Epilog: s.epilogs(c.dir), BfResolution: 1})
	// Runs before the daemons are stopped: jobs left running would keep
	// processes in the namespaces, and a slurmd whose epilogue runs does
	// not stop on SIGTERM.
	t.Cleanup(s.endJobs)
	return s, c, gs
}

// teardownOf waits until g serves node tearing down and returns its
// free_at.
func teardownOf(t *testing.T, g *aggregator, name string) time.Time {
	t.Helper()
	n := g.waitNode(t, name, "teardown", 30*time.Second, func(n node) bool { return n.State == "teardown" && n.FreeAt != nil })
	return *n.FreeAt
}

// heldUntil reports whether list holds exactly the nodes of want (a
// hostlist per reservation), each ending within 2 s of its free_at (Slurm
// keeps whole seconds; the command passes "now+N").
func heldUntil(list []slurmRes, want map[string]time.Time) bool {
	if len(list) != len(want) {
		return false
	}
	for _, r := range list {
		free, ok := want[r.Nodes]
		if !ok || r.End.Sub(free).Abs() > 2*time.Second || !strings.Contains(r.Flags, "IGNORE_JOBS") {
			return false
		}
	}
	return true
}

// TestSlurmPlan: free_at becomes Slurm's plan. On four real Slurm nodes in
// network namespaces, while n1's epilogue hangs, a pending four-node job is
// planned at n1's free_at (not "now") within one backfill pass of the
// reservation gracewatch makes; a teardown that ends early gives the node
// back at once; at D the node is drained and the reservation gone; an
// aggregator failover leaves exactly the reservations the view calls for;
// an administrator's reservation is never touched.
func TestSlurmPlan(t *testing.T) {
	s, c, aggs := startSlurmPlan(t, "2s", "agg-1", "agg-2")
	agg1, agg2 := aggs[0], aggs[1]
	s.must("scontrol", "create", "reservation", "ReservationName=maint_n2", "Nodes=n2", "StartTime=now+7200",
		"Duration=60", "Flags=MAINT", "Users=root")
	maint := func() slurmRes {
		list, err := s.reservations()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range list {
			if r.Name == "maint_n2" {
				return r
			}
		}
		t.Fatal("the administrator's reservation maint_n2 is gone")
		return slurmRes{}
	}
	adminRes := maint()
	defer func() {
		if got := maint(); got != adminRes {
			t.Errorf("the administrator's reservation changed: %+v, was %+v", got, adminRes)
		}
	}()

	ok := t.Run("a pending job is planned at free_at, and starts as soon as the teardown ends", func(t *testing.T) {
		s.hang("n1")
		job := s.submit("-w", "n1", "--wrap", "true")
		s.epilogStartOf(job, "n1", 30*time.Second)
		free := teardownOf(t, agg1, "n1")
		big := s.submit("-N4", "-t", "1", "--wrap", "true")
		// Logged only: Slurm may plan the job at once or not at all yet.
		var before time.Time
		testutil.Poll(5*time.Second, func() bool { before, _ = s.expectedStartTime(big); return !before.IsZero() })
		t.Logf("before the reservation: the 4-node job is planned at %s (now %s), n1 free at %s",
			before.Format(time.TimeOnly), time.Now().Format(time.TimeOnly), free.Format(time.TimeOnly))

		list := s.waitReservations("n1 until its free_at", 10*time.Second, func(l []slurmRes) bool {
			return heldUntil(l, map[string]time.Time{"n1": free})
		})
		held := time.Now()
		t.Logf("reservation %s on n1 until %s", list[0].Name, list[0].End.Format(time.TimeOnly))
		// Slurm's backfill runs every second (bf_interval=1); the plan
		// must be in place before free_at, or it has missed the point.
		var planned time.Time
		if !testutil.Poll(time.Until(free), func() bool {
			planned, _ = s.expectedStartTime(big)
			return !planned.Before(free.Add(-time.Second))
		}) {
			t.Fatalf("%v after the reservation (at n1's free_at) the 4-node job is planned at %s, want n1's free_at %s",
				time.Since(held).Round(time.Millisecond), planned.Format(time.TimeOnly), free.Format(time.TimeOnly))
		}
		t.Logf("the 4-node job is planned at %s, %v after the reservation (free_at %s)",
			planned.Format(time.TimeOnly), time.Since(held).Round(time.Millisecond), free.Format(time.TimeOnly))
		if planned.After(free.Add(3 * time.Second)) {
			t.Errorf("planned at %s, more than bf_resolution past free_at %s", planned.Format(time.TimeOnly), free.Format(time.TimeOnly))
		}

		s.unhang("n1")
		s.release(job)
		released := time.Now()
		s.waitReservations("gone once n1 is up", 10*time.Second, func(l []slurmRes) bool { return len(l) == 0 })
		gone := time.Since(released)
		if !testutil.Poll(45*time.Second, func() bool { return s.jobState(big) != "PENDING" }) {
			t.Fatalf("the 4-node job still pending 45 s after n1's teardown ended")
		}
		t.Logf("teardown ended: reservation gone after %v, the 4-node job left pending after %v",
			gone.Round(time.Millisecond), time.Since(released).Round(time.Millisecond))
		for _, n := range s.names {
			s.waitNodeState(n, "idle", 30*time.Second, func(state, _ string) bool { return state == "idle" })
		}
	})
	if !ok {
		return
	}

	ok = t.Run("at D the node is drained and its reservation gone", func(t *testing.T) {
		s.hang("n1")
		job := s.submit("-w", "n1", "--wrap", "true")
		free := teardownOf(t, agg1, "n1")
		s.waitReservations("n1 until its free_at", 10*time.Second, func(l []slurmRes) bool {
			return heldUntil(l, map[string]time.Time{"n1": free})
		})
		s.waitNodeState("n1", "drained", time.Until(free)+10*time.Second, func(state, _ string) bool { return strings.HasPrefix(state, "drain") })
		s.waitReservations("gone after D", 5*time.Second, func(l []slurmRes) bool { return len(l) == 0 })
		t.Logf("n1 drained %v after D; its reservation is gone", time.Since(free).Round(time.Millisecond))

		s.unhang("n1")
		s.release(job)
		aggregatorCLI(t, c, agg1, "resume", "n1", "--reason", "epilogue fixed")
		s.waitNodeState("n1", "idle", 30*time.Second, func(state, _ string) bool { return state == "idle" })
	})
	if !ok {
		return
	}

	ok = t.Run("a node Slurm does not know keeps no other node out of the plan", func(t *testing.T) {
		// n9 has a gracewatch agent but is no Slurm node: its teardown
		// and n1's share a window, so the first reservation names both
		// and Slurm refuses it; the halves follow.
		n9 := c.addAgent("n9")
		agg1.waitNode(t, "n9", "up", 30*time.Second, func(n node) bool { return n.State == "up" })
		s.hang("n1")
		job := s.submit("-w", "n1", "--wrap", "true")
		s.epilogStartOf(job, "n1", 30*time.Second)
		n9.epilog("900", "sleep", "8")
		free := teardownOf(t, agg1, "n1")
		teardownOf(t, agg1, "n9")
		s.waitReservations("n1 alone until its free_at", 15*time.Second, func(l []slurmRes) bool {
			return heldUntil(l, map[string]time.Time{"n1": free})
		})
		// Whichever way n9 was tried (with n1, or joining n1's), it ends
		// refused alone and left out for a while.
		testutil.Eventually(t, 45*time.Second, "the aggregator's log that Slurm refused n9 alone", func() bool {
			return strings.Contains(agg1.logs.String(), `"msg":"the scheduler refused to reserve this node alone: not tried again for a while"`)
		})
		if !heldUntil(s.gracewatchReservations(), map[string]time.Time{"n1": free}) {
			t.Errorf("after n9's refusal Slurm holds %+v, want n1 alone", s.gracewatchReservations())
		}
		s.unhang("n1")
		s.release(job)
		released := time.Now()
		s.waitReservations("none once n1 is up", 5*time.Second, func(l []slurmRes) bool { return len(l) == 0 })
		t.Logf("n1 given back %v after its teardown ended", time.Since(released).Round(time.Millisecond))
		agg1.waitNode(t, "n9", "up", 20*time.Second, func(n node) bool { return n.State == "up" })
		s.waitNodeState("n1", "idle", 30*time.Second, func(state, _ string) bool { return state == "idle" })
	})
	if !ok {
		return
	}

	t.Run("an aggregator failover leaves exactly the reservations the view calls for", func(t *testing.T) {
		s.hang("n3")
		s.hang("n4")
		job3 := s.submit("-w", "n3", "--wrap", "true")
		free3 := teardownOf(t, agg1, "n3")
		s.waitReservations("n3 held by agg-1", 10*time.Second, func(l []slurmRes) bool {
			return heldUntil(l, map[string]time.Time{"n3": free3})
		})
		// The leader dies (kill -9: it deletes nothing); n4's teardown
		// starts while agg-2 takes over.
		agg1.crash()
		job4 := s.submit("-w", "n4", "--wrap", "true")
		free4 := teardownOf(t, agg2, "n4")
		wantHeld := func(l []slurmRes) bool {
			// n4 joins n3's reservation when their free_at lie within
			// the window, or gets its own.
			return heldUntil(l, map[string]time.Time{"n[3-4]": free4}) ||
				heldUntil(l, map[string]time.Time{"n3": free3, "n4": free4})
		}
		list := s.waitReservations("n3 and n4, kept by agg-2", 20*time.Second, wantHeld)
		t.Logf("after the failover: %+v", list)

		s.unhang("n3")
		s.release(job3)
		list = s.waitReservations("n4 only once n3 is up", 10*time.Second, func(l []slurmRes) bool {
			return len(l) == 1 && l[0].Nodes == "n4" && !l[0].End.Before(free4.Add(-2*time.Second))
		})
		t.Logf("n3 up: %+v", list)
		s.unhang("n4")
		s.release(job4)
		s.waitReservations("none once n4 is up", 10*time.Second, func(l []slurmRes) bool { return len(l) == 0 })
		for _, n := range []string{"n3", "n4"} {
			s.waitNodeState(n, "idle", 30*time.Second, func(state, _ string) bool { return state == "idle" })
		}
		if runs := actuatorRuns(agg2, "down"); runs != 0 {
			t.Errorf("agg-2 drained %d nodes", runs)
		}
	})
}

// planRun is what one run of TestSlurmPlanCompare saw, relative to the
// start of n1's epilogue.
type planRun struct {
	name string
	// planned is the 4-node job's squeue --start over time: "from +Ns:
	// +Ms" (or "now": at Slurm's every pass), without repeats.
	planned []string
	// shortStarts are when the three 1-node jobs started.
	shortStarts []time.Duration
	// bigStart is when the 4-node job started.
	bigStart time.Duration
	// idle is the node-seconds of n2..n4 idle (or planned for the 4-node
	// job) until it started.
	idle float64
	// held is when gracewatch's reservation appeared (zero: none).
	held time.Duration
}

// TestSlurmPlanCompare (GRACEWATCH_SLURM_COMPARE=1, about 3 minutes): n1's
// epilogue runs 60 s (within G = 90 s), a 4-node job waits for it, three
// 30-second 1-node jobs wait behind that; with gracewatch's agents and
// actuators either way, without and with its reservations. It logs the
// 4-node job's planned start over time, when the short jobs started and
// the idle node-seconds of n2..n4 until the 4-node job started:
// BENCHMARKS.md, "The scheduler's plan: Slurm reservations until free_at".
func TestSlurmPlanCompare(t *testing.T) {
	if os.Getenv("GRACEWATCH_SLURM_COMPARE") == "" {
		t.Skip("opt-in comparison (about 3 minutes): set GRACEWATCH_SLURM_COMPARE=1")
	}
	const hold = 60 * time.Second
	var runs []planRun
	for _, mode := range []struct{ name, after string }{{"without reservations", ""}, {"with reservations (after = 10s)", "10s"}} {
		t.Run(mode.name, func(t *testing.T) {
			s, _, aggs := startSlurmPlanGrace(t, mode.after, 90*time.Second, "agg-1")
			r := planRun{name: mode.name}
			s.hang("n1")
			job := s.submit("-w", "n1", "--wrap", "true")
			start := s.epilogStartOf(job, "n1", 30*time.Second)
			teardownOf(t, aggs[0], "n1")
			big := s.submit("-N4", "-t", "5", "--wrap", "sleep 5")
			var short []string
			for range 3 {
				short = append(short, s.submit("-N1", "-t", "0:30", "--wrap", "sleep 20"))
			}
			r.shortStarts = make([]time.Duration, len(short))
			last := ""
			prev := time.Now()
			for {
				now := time.Now()
				at := now.Sub(start)
				if at >= hold && !fileExists(s.path("release-"+job)) {
					s.unhang("n1")
					s.release(job)
				}
				if r.held == 0 && len(s.gracewatchReservations()) > 0 {
					r.held = at
				}
				plannedAt, state := s.expectedStartTime(big)
				if state == "RUNNING" || state == "COMPLETING" || state == "" {
					r.bigStart = at
					break
				}
				if !plannedAt.IsZero() {
					// "now" (Slurm plans it at its own pass's time),
					// or a time relative to the epilogue's start.
					p := fmt.Sprintf("+%.0fs", plannedAt.Sub(start).Seconds())
					if plannedAt.Sub(now).Abs() <= 2*time.Second {
						p = "now"
					}
					if p != last {
						r.planned = append(r.planned, fmt.Sprintf("from +%.0fs: %s", at.Seconds(), p))
						last = p
					}
				}
				for i, j := range short {
					if st := s.jobState(j); r.shortStarts[i] == 0 && st != "PENDING" {
						r.shortStarts[i] = at
					}
				}
				for _, n := range []string{"n2", "n3", "n4"} {
					if state, _, err := s.nodeState(n); err == nil && (state == "idle" || state == "planned") {
						r.idle += now.Sub(prev).Seconds()
					}
				}
				prev = now
				if at > 150*time.Second {
					t.Fatalf("the 4-node job did not start within 150 s")
				}
				time.Sleep(500 * time.Millisecond) // not a wait: the comparison's sampling interval
			}
			t.Logf("%s: reservation at +%v; 4-node job planned %q, started +%v; short jobs started %v; idle node-seconds of n2..n4: %.0f",
				r.name, r.held.Round(100*time.Millisecond), r.planned, r.bigStart.Round(100*time.Millisecond), r.shortStarts, r.idle)
			runs = append(runs, r)
		})
	}
	for _, r := range runs {
		t.Logf("| %s | %v | %s | %v | %v | %.0f |", r.name, r.held.Round(100*time.Millisecond), strings.Join(r.planned, "; "),
			r.shortStarts, r.bigStart.Round(100*time.Millisecond), r.idle)
	}
	if len(runs) == 2 {
		without, with := runs[0], runs[1]
		if with.held == 0 {
			t.Errorf("%s: no reservation was made", with.name)
		}
		plannedBetter(t, with.name, without.name, with.shortStarts, with.bigStart, with.idle, without.idle)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
