package agent_test

// End-to-end tests of the agent's bounds (issue 11): job ids and the names
// they map to, the epilogue output kept, the state file on a full disk.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/agent/jobname"
)

// longJobID is 128 bytes (api.MaxJobIDBytes) of two-byte runes: the longest
// id the API accepts, which the earlier mapping hex-encoded into a cgroup
// name the kernel refused (file name too long).
var longJobID = strings.Repeat("ƒ", api.MaxJobIDBytes/2)

// TestJobIDsHaveTheirOwnCgroups: ids that the earlier mapping gave one
// cgroup (a:b and x613a62, and the longest id) run their epilogues in
// cgroups of their own, each job's release waits for its own epilogue only,
// and after a crash and a restart every job comes back under the same names.
func TestJobIDsHaveTheirOwnCgroups(t *testing.T) {
	n := startNode(t, nodeOpts{grace: "1m"})
	ids := []string{"a:b", "x613a62", "a_b", longJobID}
	for _, id := range ids {
		n.jobStart(id, time.Now().Add(time.Hour))
	}
	gate := func(i int) string { return filepath.Join(n.dir, fmt.Sprintf("go-%d", i)) }
	for i, id := range ids {
		n.epilog(id, "sh", "-c", fmt.Sprintf("cat /proc/self/cgroup > %s/cg-%d; while [ ! -e %s ]; do sleep 0.05; done", n.dir, i, gate(i)))
	}
	cgOf := func(i int) string {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			data, err := os.ReadFile(filepath.Join(n.dir, fmt.Sprintf("cg-%d", i)))
			if err == nil && len(data) > 0 {
				_, p, _ := strings.Cut(strings.TrimSpace(string(data)), "::")
				return p
			}
			if time.Now().After(deadline) {
				t.Fatalf("epilogue %d (job %q) wrote no cgroup: %v\nlogs:\n%s", i, ids[i], err, n.logs)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	seen := map[string]string{}
	for i, id := range ids {
		cg := cgOf(i)
		want := "/" + jobname.Cgroup(id) + "/epilog"
		if !strings.HasSuffix(cg, want) {
			t.Errorf("job %q: epilogue in cgroup %s, want one ending in %s", id, cg, want)
		}
		if other, ok := seen[cg]; ok {
			t.Errorf("jobs %q and %q share the cgroup %s", other, id, cg)
		}
		seen[cg] = id
	}
	// The state file names every job, and a restart finds them all under
	// the same cgroups.
	before := n.status()
	n.crash()
	n.start()
	after := n.status()
	for i, j := range after.Jobs {
		if j.Phase != api.PhaseTeardown || j.Cgroup != before.Jobs[i].Cgroup {
			t.Errorf("after restart: job %q phase %s cgroup %s, want teardown in %s", j.ID, j.Phase, j.Cgroup, before.Jobs[i].Cgroup)
		}
	}
	// Release the first job only: the second (its old twin) stays.
	if err := os.WriteFile(gate(0), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	phase := func(st api.Status, id string) string {
		for _, j := range st.Jobs {
			if j.ID == id {
				return j.Phase
			}
		}
		return "absent"
	}
	n.waitFor("a:b released", 10*time.Second, func(st api.Status) bool { return phase(st, "a:b") == api.PhaseReleased })
	if p := phase(n.status(), "x613a62"); p != api.PhaseTeardown {
		t.Fatalf("x613a62 is %s after a:b's release, want teardown", p)
	}
	for i := 1; i < len(ids); i++ {
		if err := os.WriteFile(gate(i), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	st := n.waitFor("all released", 10*time.Second, func(st api.Status) bool {
		for _, id := range ids {
			if phase(st, id) != api.PhaseReleased {
				return false
			}
		}
		return true
	})
	for _, j := range st.Jobs {
		if j.Outcome != "clean" {
			t.Errorf("job %q: outcome %q, want clean", j.ID, j.Outcome)
		}
	}
	// The longest id works on every command.
	if _, e, code := n.cli("diagnose", "--job", longJobID); code != 0 && !strings.Contains(e, "no report") {
		t.Errorf("diagnose --job <128 bytes>: exit %d: %s", code, e)
	}
	if _, e, code := n.cli("job", "start", "--job", longJobID+"x", "--expiration", "0"); code == 0 || !strings.Contains(e, "longer than 128") {
		t.Errorf("job start with a 129-byte id: exit %d: %s; want a refusal naming the bound", code, e)
	}
}
