package e2e

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	aggapi "github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/internal/testutil"
)

// TestGraceAdvisorRealEpilogues is issue 17's test 2 with real epilogues:
// an observing cluster (G = 2 s; nothing is signalled, so every teardown
// lasts as long as its processes) runs epilogues of known lengths on three
// agents and a fourth that hangs on a real FUSE mount, and the grace
// advisor's table over them (GET /v1/grace, candidates 1, 3 and 6 s and the
// G in force) is the hand-computed one:
//
//	node  job  user   epilogue            duration  outcome
//	n1    11   alice  sleep 0.2           ~0.2 s    clean
//	n1    12   alice  sleep 1.5           ~1.5 s    clean
//	n2    21   bob    sleep 4             ~4 s      exited (after D, by itself)
//	n3    31   carol  cat on a hung FUSE  running   (still running at the query, > 6 s)
//
//	G     overdue  nodes  false drains
//	1 s   3        3      2   (12 and 21 ended by themselves)
//	2 s   2        2      1   (21)
//	3 s   2        2      1
//	6 s   1        1      0   (only the hung one)
//
// The durations count no teardown as longer than the longest two nodes
// reached (n1's 1.5 s; n2's 4 s is one node's, named). Four teardowns are
// too thin to recommend a G from (the advisor says so);
// the top users over 3 s are bob (one long) and carol (one long, and hung:
// still running). The
// same table comes back after the aggregator restarts over its state dir.
func TestGraceAdvisorRealEpilogues(t *testing.T) {
	c := newCluster(t)
	c.mode = "observe"
	c.grace = "2s"
	c.killWait, c.unkillableAfter = "1s", "1s"
	agg := c.addAggregator("agg-1")
	n1, n2, n3 := c.addAgent("n1"), c.addAgent("n2"), c.addAgent("n3")

	// The hung one first: it must be running for more than 6 s when the
	// table is read.
	fs := startHangfs(t, filepath.Join(c.dir, "fs"))
	hung := epilogAs(t, n3, "31", "carol", "cat", fs.file())
	fs.waitRead(10 * time.Second)
	hungSince := time.Now()
	for _, e := range []struct {
		a         *agent
		job, user string
		argv      []string
	}{
		{n1, "11", "alice", []string{"sleep", "0.2"}},
		{n1, "12", "alice", []string{"sleep", "1.5"}},
		{n2, "21", "bob", []string{"sleep", "4"}},
	} {
		if err := epilogAs(t, e.a, e.job, e.user, e.argv...).Wait(); err != nil {
			t.Fatalf("epilog %s on %s: %v", e.job, e.a.node, err)
		}
	}
	if d := 7*time.Second - time.Since(hungSince); d > 0 {
		time.Sleep(d) // not a wait: the hung teardown's age is part of what is measured (over 6 s, the largest candidate G)
	}

	check := func(when string) {
		t.Helper()
		var adv aggapi.GraceAdvice
		var last string
		if !testutil.Poll(20*time.Second, func() bool {
			adv, last = graceAdvice(t, c, agg, "g=1s,3s,6s&top_g=3s")
			return adv.Records == 3 && adv.Running == 1
		}) {
			t.Fatalf("%s: the advisor does not count 3 released and 1 running teardown within 20 s: %s", when, last)
		}
		type row struct{ overdue, nodes, falseDrains int }
		want := map[float64]row{1: {3, 3, 2}, 2: {2, 2, 1}, 3: {2, 2, 1}, 6: {1, 1, 0}}
		for _, cand := range adv.Candidates {
			w, ok := want[cand.G]
			if !ok {
				t.Errorf("%s: an unasked candidate G = %v s", when, cand.G)
				continue
			}
			delete(want, cand.G)
			if got := (row{cand.Overdue, cand.Nodes, cand.FalseDrains}); got != w {
				t.Errorf("%s: G = %v s: overdue, nodes, false drains = %v; want %v", when, cand.G, got, w)
			}
			if cand.G == 2 && !cand.InForce {
				t.Errorf("%s: G = 2 s is the G in force and not marked so", when)
			}
		}
		if len(want) > 0 {
			t.Errorf("%s: candidates missing: %v (got %+v)", when, want, adv.Candidates)
		}
		if d := adv.Durations; d.Count != 3 || d.Max < 1.5 || d.Max > 2.5 || d.P50 < 1.5 || d.P50 > 2.5 || d.Bound != d.Max ||
			len(d.Above) != 1 || d.Above[0].Node != "n2" || d.Above[0].Job != "21" || d.Above[0].Duration < 4 || d.Above[0].Duration > 5.5 {
			t.Errorf("%s: durations %+v: want 3, the median ~1.5 s, counted up to n1's ~1.5 s (the longest two nodes reached), n2's ~4 s above it", when, d)
		}
		if lr := adv.LongestRunning; lr == nil || lr.Node != "n3" || lr.Job != "31" || lr.User != "carol" || lr.Duration < 7 {
			t.Errorf("%s: longest running %+v: want n3's job 31 of carol, at least 7 s", when, lr)
		}
		if adv.Recommendation != nil || adv.Thin == "" {
			t.Errorf("%s: 4 teardowns recommended G %+v (thin: %q); want the data called too thin", when, adv.Recommendation, adv.Thin)
		}
		users := map[string]aggapi.GraceTop{}
		for _, u := range adv.TopUsers {
			users[u.Name] = u
		}
		if users["bob"].Long != 1 || users["carol"].Long != 1 || users["carol"].Hung != 1 || users["alice"].Long+users["alice"].Hung != 0 {
			t.Errorf("%s: top users over 3 s %+v: want bob 1 long, carol 1 long and hung (still running), alice none", when, adv.TopUsers)
		}
	}
	check("first")

	agg.stop()
	agg.start()
	agg.waitReady()
	check("after the aggregator's restart")

	// The file system goes away: the hung read fails and its epilogue
	// ends (its status is cat's error, not what is tested here).
	if err := fs.stop(); err != nil {
		t.Error(err)
	}
	hung.Wait()
}

// epilogAs starts `nodeagent epilog --job job --user user -- argv` on a.
func epilogAs(t *testing.T, a *agent, job, user string, argv ...string) *exec.Cmd {
	t.Helper()
	return a.epilogArgs(append([]string{"--job", job, "--user", user, "--"}, argv...)...)
}

// graceAdvice asks g's advisor (GET /v1/grace?query, with the token); on a
// failure it returns the zero answer and what went wrong.
func graceAdvice(t *testing.T, c *cluster, g *aggregator, query string) (aggapi.GraceAdvice, string) {
	t.Helper()
	var adv aggapi.GraceAdvice
	body, err := getJSON(g.url+"/v1/grace?"+query, c.token, &adv)
	if err != nil {
		return aggapi.GraceAdvice{}, err.Error()
	}
	return adv, string(body)
}
