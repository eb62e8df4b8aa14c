package e2e

import (
	"encoding/json"
	"fmt"
	"os/user"
	"testing"
	"time"

	aggapi "github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/internal/testutil"
)

// Attribution (issue 17): the shipped prologs name the job's user with its
// registration; the agent keeps it in the job, its reports and what it
// sends the aggregators.

// jobOwner is the user the tests' Slurm and Flux jobs run as: this
// process's (root in CI), as the prologs resolve it.
func jobOwner(t testing.TB) string {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	return u.Username
}

// checkJobUser fails unless the agent's job names user.
func checkJobUser(t testing.TB, a *agent, job, user string) {
	t.Helper()
	for _, j := range agentStatus(t, a).Jobs {
		if j.ID == job {
			if j.User != user {
				t.Errorf("agent %s: job %s has user %q, want %q (from the shipped prolog)", a.node, job, j.User, user)
			}
			return
		}
	}
	t.Errorf("agent %s: no job %s", a.node, job)
}

// servedReport is the agent's report of node that the aggregator serves
// (GET /v1/nodes/{name}: last_report.detail, served with a token), decoded
// as far as attribution needs it.
func servedReport(g *aggregator, token, name string) (job, user string, err error) {
	var n aggapi.Node
	body, err := getJSON(g.url+"/v1/nodes/"+name, token, &n)
	if err != nil {
		return "", "", err
	}
	if n.LastReport == nil || len(n.LastReport.Detail) == 0 {
		return "", "", fmt.Errorf("node %s has no report with its detail: %s", name, body)
	}
	var d struct {
		Job  string `json:"job"`
		User string `json:"user"`
	}
	err = json.Unmarshal(n.LastReport.Detail, &d)
	return d.Job, d.User, err
}

// checkServedUser waits until the aggregator serves node's report of job
// and fails unless it names user.
func checkServedUser(t testing.TB, c *cluster, g *aggregator, name, job, user string) {
	t.Helper()
	var got string
	var err error
	if !testutil.Poll(10*time.Second, func() bool {
		var j string
		j, got, err = servedReport(g, c.token, name)
		return err == nil && j == job
	}) {
		t.Fatalf("the aggregator serves no report of job %s on %s after 10 s: %v", job, name, err)
	}
	if got != user {
		t.Errorf("the aggregator serves %s's report of job %s with user %q, want %q", name, job, got, user)
	}
}

// checkGraceTopUser waits until the aggregator's grace advisor (GET
// /v1/grace, its teardowns over top_g counted as long) lists user among its
// top users, and fails if it does not within 15 s: the released teardown's
// record reaches the aggregator's history with the user its prolog named.
func checkGraceTopUser(t testing.TB, c *cluster, g *aggregator, topG, user string) {
	t.Helper()
	var last string
	if !testutil.Poll(15*time.Second, func() bool {
		var adv aggapi.GraceAdvice
		body, err := getJSON(g.url+"/v1/grace?top_g="+topG, c.token, &adv)
		if last = string(body); err != nil {
			last = err.Error()
			return false
		}
		for _, u := range adv.TopUsers {
			if u.Name == user && u.Long+u.Hung > 0 {
				return true
			}
		}
		return false
	}) {
		t.Errorf("the grace advisor does not list user %q among its top users after 15 s: %s", user, last)
	}
}
