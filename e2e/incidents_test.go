package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/internal/hostlist"
	"github.com/gracewatch/gracewatch/internal/testutil"
)

// TestIncidents is issue 16's proof with real parts: 30 node agents and an
// aggregator on loopback, real cgroups and epilogues, and two real FUSE
// mounts (hangfs-serve) whose reads never answer. Twenty nodes' epilogues
// hang on one mount and two on the other within a few seconds:
//
//  1. the aggregator serves two incidents, naming their mounts, with the
//     right hostlists, logged once each (not once per node);
//  2. with the limit at 10 % of 30 nodes, 3 drains run and 19 are held,
//     shown by GET /v1/incidents, /readyz and /metrics; a drained node that
//     comes back frees a slot for one held drain; `aggregator incident
//     confirm` lets the first incident's held drains through;
//  3. the first FUSE server comes back (stops: the kernel aborts its
//     connection and the hung readers end): with [incidents] auto_resume,
//     every node of that incident is resumed once its agent found it clean,
//     its on="up" actuator runs in a few batched runs, each for a hostlist,
//     and the incident closes with its duration.
//
// (Auto-resume off, the clock, and the fuzzing of the new fields are
// proved at the aggregator: aggregator/incidents_test.go.)
func TestIncidents(t *testing.T) {
	c := newCluster(t)
	actions := filepath.Join(c.dir, "actions.log")
	c.killWait, c.unkillableAfter = "1s", "2s"
	c.aggConf = `
[incidents]
auto_resume = true
drain_limit_nodes = 0
drain_limit_fraction = 0.1
` + actuatorLogUp(actions, "{nodes}")
	agg := c.addAggregator("agg-1")
	const n = 30
	agents := make([]*agent, n+1)
	for i := 1; i <= n; i++ {
		agents[i] = c.addAgent(fmt.Sprintf("n%d", i))
	}
	waitFor(t, "30 nodes up", 60*time.Second, func() bool {
		nodes, err := fetchNodes(agg.url + "/v1/nodes?state=up")
		return err == nil && len(nodes) == n
	})
	fsA, fsB := startHangfs(t, filepath.Join(c.dir, "fsa")), startHangfs(t, filepath.Join(c.dir, "fsb"))

	start := time.Now()
	exp := time.Now().Add(time.Hour).Format(time.RFC3339)
	for i := 1; i <= 22; i++ {
		fs := fsA
		if i > 20 {
			fs = fsB
		}
		if out, code := agents[i].cli("job", "start", "--job", "1", "--expiration", exp); code != 0 {
			t.Fatalf("job start on n%d: %s", i, out)
		}
		agents[i].epilog("1", "cat", fs.file())
	}
	waitFor(t, "22 nodes down", 60*time.Second, func() bool {
		nodes, err := fetchNodes(agg.url + "/v1/nodes?state=down")
		return err == nil && len(nodes) == 22
	})
	t.Logf("22 nodes down %v after their epilogues started", time.Since(start).Round(time.Millisecond))

	var il api.IncidentList
	waitFor(t, "two incidents with their 22 nodes", 20*time.Second, func() bool {
		il = incidents(t, agg)
		return len(il.Incidents) == 2 && il.Incidents[0].Count+il.Incidents[1].Count == 22 && il.Limit.Held == 19
	})
	a, b := il.Incidents[0], il.Incidents[1]
	if a.Mountpoint != fsA.mnt {
		a, b = b, a
	}
	if a.Mountpoint != fsA.mnt || a.Nodes != "n[1-20]" || a.FSType != "fuse.hangfs" || a.Kind != "filesystem" {
		t.Errorf("incident of %s: %+v, want n[1-20]", fsA.mnt, a)
	}
	if b.Mountpoint != fsB.mnt || b.Nodes != "n[21-22]" {
		t.Errorf("incident of %s: %+v, want n[21-22]", fsB.mnt, b)
	}
	if a.Example == nil || a.Example.Comm != "cat" {
		t.Errorf("example %+v, want the cat reading the mount", a.Example)
	}
	logs := agg.logs.String()
	if got := strings.Count(logs, `"msg":"incident opened"`); got != 2 {
		t.Errorf("%d 'incident opened' lines, want 2", got)
	}
	if got := strings.Count(logs, `"msg":"incident `); got > 4 {
		t.Errorf("%d incident log lines for 22 nodes, want one per incident change, not per node", got)
	}

	// The limit: 3 drains, 19 held and shown.
	drains := func() []string { return actionLines(t, actions, "down ") }
	waitFor(t, "3 drains", 10*time.Second, func() bool { return len(drains()) == 3 })
	if rd := readyz(t, agg); rd.HeldDrains != 19 || !strings.Contains(rd.Detail, "19 drains held") {
		t.Errorf("readyz held %d: %q", rd.HeldDrains, rd.Detail)
	}
	if a.HeldCount+b.HeldCount != 19 {
		t.Errorf("held %d + %d, want 19", a.HeldCount, b.HeldCount)
	}
	metrics := get(t, agg.url+"/metrics", c.token)
	series := regexp.MustCompile(`(?m)^gracewatch_aggregator_incident_nodes\{.*\} (\d+)$`).FindAllStringSubmatch(metrics, -1)
	if len(series) != 2 || !strings.Contains(metrics, `cause="fuse.hangfs gracewatch-hangfs on `+fsA.mnt+`"`) {
		t.Errorf("incident_nodes series %q, want 2 naming their mounts", series)
	}
	for _, d := range drains() {
		if !regexp.MustCompile(`^down n\d+ incident \d+ \(fuse\.hangfs .*/fs[ab], \d+ nodes?\): job 1 `).MatchString(d) {
			t.Errorf("drain %q does not name its incident", d)
		}
	}

	// A drained node comes back (resumed by an administrator): its slot
	// frees, one held drain runs.
	back := strings.Fields(drains()[0])[1]
	if code, body := agg.post(t, "/v1/nodes/"+back+"/resume", c.token, `{"reason":"checked"}`); code != 200 {
		t.Fatalf("resume %s: %d %s", back, code, body)
	}
	waitFor(t, "a fourth drain", 10*time.Second, func() bool { return len(drains()) == 4 })
	waitFor(t, "the on=up run of the node that came back", 10*time.Second, func() bool {
		return slices.Contains(actionLines(t, actions, "up "), "up "+back)
	})

	// Confirm the first incident: its held drains run.
	out := aggregatorCLI(t, c, agg, "incident", "confirm", fmt.Sprint(a.ID), "--reason", "the FUSE server is dead")
	t.Logf("confirm: %s", strings.TrimSpace(out))
	wantA := 19 // n[1-20] but the one that came back
	waitFor(t, "every node of the first incident drained", 20*time.Second, func() bool {
		count := 0
		for _, d := range drains() {
			if strings.Contains(d, "/fsa, ") {
				count++
			}
		}
		return count >= wantA
	})
	for _, inc := range incidents(t, agg).Incidents {
		if inc.ID == a.ID && (inc.HeldCount != 0 || !inc.Confirmed) {
			t.Errorf("after the confirmation: %+v, want confirmed and nothing held", inc)
		}
		if inc.ID == b.ID && inc.HeldCount+strings.Count(strings.Join(drains(), "\n"), "/fsb, ") != 2 {
			t.Errorf("the second incident's held drains were let through too: %+v, drains %q", inc, drains())
		}
	}

	// The first FUSE server comes back: every agent of the first incident
	// finds its node clean, the aggregator resumes them, their on=up
	// actuator runs in batches, and the incident closes.
	drainedA := map[string]bool{}
	for _, d := range drains() {
		if strings.Contains(d, "/fsa, ") {
			drainedA[strings.Fields(d)[1]] = true
		}
	}
	delete(drainedA, back)
	if err := fsA.stop(); err != nil {
		t.Fatal(err)
	}
	cleared := time.Now()
	waitFor(t, "the first incident closed", 60*time.Second, func() bool {
		for _, inc := range incidents(t, agg).Incidents {
			if inc.ID == a.ID {
				return inc.State == "closed"
			}
		}
		return false
	})
	t.Logf("incident %d closed %v after its FUSE server stopped", a.ID, time.Since(cleared).Round(time.Millisecond))
	// Each node is resumed once its own agent has found it clean and said
	// so: the incident's close does not wait for the last of them.
	var notUp []string
	if !testutil.Poll(60*time.Second, func() bool {
		notUp = notUp[:0]
		for i := 1; i <= 20; i++ {
			if nd, _ := agg.node(t, fmt.Sprintf("n%d", i)); nd.State != "up" {
				notUp = append(notUp, fmt.Sprintf("n%d %s", i, nd.State))
			}
		}
		return len(notUp) == 0
	}) {
		t.Errorf("60 s after the incident cleared, not up: %s", strings.Join(notUp, ", "))
	}
	// Their on=up actuator runs once per batch (2 s) with a hostlist.
	var ups []string
	waitFor(t, "an on=up run for every drained node of the first incident", 20*time.Second, func() bool {
		ups = actionLines(t, actions, "up ")
		upNodes := map[string]bool{}
		for _, u := range ups {
			names, err := hostlist.Expand(strings.TrimPrefix(u, "up "))
			if err != nil {
				t.Fatalf("up run %q: %v", u, err)
			}
			for _, name := range names {
				upNodes[name] = true
			}
		}
		for name := range drainedA {
			if !upNodes[name] {
				return false
			}
		}
		return true
	})
	if len(ups) > 5 {
		t.Errorf("%d on=up runs for %d nodes, want them batched: %q", len(ups), len(drainedA)+1, ups)
	}
	t.Logf("on=up runs: %q", ups)
	closed := closedIncident(t, agg, a.ID)
	if closed.Closed == nil || closed.Duration <= 0 {
		t.Errorf("closed incident %+v, want its duration", closed)
	}
	if !strings.Contains(agg.logs.String(), `"msg":"incident closed"`) {
		t.Error("no 'incident closed' line")
	}
	// The second incident stays: its FUSE server is still dead.
	if nd, _ := agg.node(t, "n21"); nd.State != "down" {
		t.Errorf("n21 is %s, want down", nd.State)
	}
}

func incidents(t testing.TB, g *aggregator) api.IncidentList {
	t.Helper()
	var il api.IncidentList
	if err := json.Unmarshal([]byte(get(t, g.url+"/v1/incidents", "")), &il); err != nil {
		t.Fatalf("GET /v1/incidents: %v", err)
	}
	return il
}

func closedIncident(t testing.TB, g *aggregator, id uint64) api.Incident {
	t.Helper()
	for _, inc := range incidents(t, g).Incidents {
		if inc.ID == id {
			return inc
		}
	}
	t.Fatalf("no incident %d", id)
	return api.Incident{}
}

type readiness struct {
	HeldDrains int    `json:"held_drains"`
	Detail     string `json:"detail"`
}

func readyz(t testing.TB, g *aggregator) readiness {
	t.Helper()
	var r readiness
	if err := json.Unmarshal([]byte(get(t, g.url+"/readyz", "")), &r); err != nil {
		t.Fatalf("readyz: %v", err)
	}
	return r
}

func get(t testing.TB, url, token string) string {
	t.Helper()
	_, b, err := call("GET", url, token, "")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var actionsMu sync.Mutex

// actionLines returns the lines of the actuators' log that begin with prefix.
func actionLines(t testing.TB, path, prefix string) []string {
	t.Helper()
	actionsMu.Lock()
	defer actionsMu.Unlock()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return slices.Clip(out)
}

// waitFor is testutil.Eventually.
func waitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, timeout, what, cond)
}
