package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// fluxGraceMismatch: two queues, batch (the default) and debug, and a
// plugin whose G for debug is not the agents' ([gracewatch] queues): a job
// in batch is planned with the agents' G and reported by nobody; a job in
// debug is planned with the queue's G and reported by its node's agent
// (its log; the same event counts gracewatch_agent_grace_mismatches_total,
// agent/metrics_test.go) and by its prolog in Flux's own log (flux dmesg).
// The configuration and Fluxion are restored at the end.
func fluxGraceMismatch(t *testing.T, g *gracewatchFlux, planG time.Duration) {
	s := g.s
	a := g.agents["fake0"]
	good := s.must("config", "get")
	load := func(text string) {
		t.Helper()
		if out, err := s.configLoad(text); err != nil {
			t.Fatalf("flux config load: %v: %s", err, out)
		}
		s.reloadFluxion()
		s.must("queue", "start", "--all")
	}
	var conf map[string]any
	if err := json.Unmarshal([]byte(good), &conf); err != nil {
		t.Fatal(err)
	}
	debugG := planG / 3
	conf["queues"] = map[string]any{"batch": map[string]any{}, "debug": map[string]any{}}
	conf["policy"] = map[string]any{"jobspec": map[string]any{"defaults": map[string]any{"system": map[string]any{"queue": "batch"}}}}
	conf["gracewatch"] = map[string]any{"grace": planG.String(), "queues": map[string]any{"debug": debugG.String()}}
	text, _ := json.Marshal(conf)
	load(string(text))
	defer load(good)

	batch := s.submit("-N1", "--requires=rank:0", "-t", "4s", "--job-name=batch", "true")
	debug := s.submit("-N1", "--requires=rank:0", "-q", "debug", "-t", "4s", "--job-name=debug", "true")
	for _, c := range []struct {
		j    fluxJob
		want time.Duration
	}{{batch, 4*time.Second + planG}, {debug, 4*time.Second + debugG}} {
		var js struct {
			Attributes struct {
				System struct {
					Duration float64 `json:"duration"`
					Queue    string  `json:"queue"`
				} `json:"system"`
			} `json:"attributes"`
		}
		if err := json.Unmarshal([]byte(s.must("job", "info", c.j.f58, "jobspec")), &js); err != nil {
			t.Fatal(err)
		}
		if sys := js.Attributes.System; sys.Duration != c.want.Seconds() {
			t.Errorf("job %s in queue %q: duration %vs, want T + the queue's G = %v", c.j.f58, sys.Queue, sys.Duration, c.want)
		}
	}
	for _, j := range []fluxJob{batch, debug} {
		s.waitJob(j, "inactive", 60*time.Second, func(i jobInfo) bool { return i.State == "INACTIVE" })
	}
	logged := func(msg string, j fluxJob) string {
		for _, l := range strings.Split(a.logs.String(), "\n") {
			if strings.Contains(l, msg) && strings.Contains(l, `"job":"`+j.dec+`"`) {
				return l
			}
		}
		return ""
	}
	var line string
	testutil.Eventually(t, 30*time.Second, "the agent's grace mismatch logged, the batch job released", func() bool {
		line = logged("grace mismatch", debug)
		return line != "" && logged("teardown released", batch) != ""
	})
	if !strings.Contains(line, `"plan_grace":"`+debugG.String()+`"`) {
		t.Errorf("the agent's grace mismatch line for job %s does not name plan_grace %v: %q", debug.dec, debugG, line)
	}
	// A mismatch of the batch job would have been logged at its
	// registration, before its release.
	if l := logged("grace mismatch", batch); l != "" {
		t.Errorf("a job planned with the agents' G reported as a mismatch: %s", l)
	}
	found := false
	for _, l := range strings.Split(s.must("dmesg"), "\n") {
		if strings.Contains(l, "grace mismatch") && strings.Contains(l, "job "+debug.dec) {
			found = true
			t.Logf("flux dmesg: %s", strings.TrimSpace(l))
		}
	}
	if !found {
		t.Errorf("flux dmesg has no grace mismatch of job %s (the prolog's standard error)", debug.dec)
	}
}
