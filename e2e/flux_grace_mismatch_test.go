package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// fluxGraceMismatch: the plugin's G is set to another value than the
// agents' (a flux config load of [gracewatch] grace); a job started then
// is reported by its node's agent (its log; the same event counts
// gracewatch_agent_grace_mismatches_total, agent/metrics_test.go) and by its
// prolog in Flux's own log (flux dmesg). The configuration is restored at
// the end.
func fluxGraceMismatch(t *testing.T, g *gracewatchFlux, planG time.Duration) {
	s := g.s
	a := g.agents["fake0"]
	good := s.must("config", "get")
	load := func(text string) {
		t.Helper()
		if out, err := s.configLoad(text); err != nil {
			t.Fatalf("flux config load: %v: %s", err, out)
		}
	}
	var conf map[string]any
	if err := json.Unmarshal([]byte(good), &conf); err != nil {
		t.Fatal(err)
	}
	other := planG / 3
	conf["gracewatch"] = map[string]any{"grace": other.String()}
	text, _ := json.Marshal(conf)
	load(string(text))
	defer load(good)

	j := s.submit("-N1", "--requires=rank:0", "-t", "4s", "--job-name=mismatch", "true")
	s.waitJob(j, "inactive", 60*time.Second, func(i jobInfo) bool { return i.State == "INACTIVE" })
	var line string
	testutil.Eventually(t, 30*time.Second, "the agent's grace mismatch logged", func() bool {
		for _, l := range strings.Split(a.logs.String(), "\n") {
			if strings.Contains(l, "grace mismatch") && strings.Contains(l, `"job":"`+j.dec+`"`) {
				line = l
				return true
			}
		}
		return false
	})
	if !strings.Contains(line, `"plan_grace":"`+other.String()+`"`) {
		t.Errorf("the agent's grace mismatch line for job %s does not name plan_grace %v: %q", j.dec, other, line)
	}
	dmesg := s.must("dmesg")
	found := false
	for _, l := range strings.Split(dmesg, "\n") {
		if strings.Contains(l, "grace mismatch") && strings.Contains(l, "job "+j.dec) {
			found = true
			t.Logf("flux dmesg: %s", strings.TrimSpace(l))
		}
	}
	if !found {
		t.Errorf("flux dmesg has no grace mismatch of job %s (the prolog's standard error)", j.dec)
	}
}
