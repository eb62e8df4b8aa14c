package agent_test

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/agent/diagnose"
)

// freeAddr returns a loopback address with a port that was free a moment
// ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// scrape gets the agent's /metrics and returns its sample lines.
func scrape(t *testing.T, addr string) map[string]bool {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v\n%s", resp.StatusCode, err, body)
	}
	lines := map[string]bool{}
	for l := range strings.Lines(string(body)) {
		lines[strings.TrimSpace(l)] = true
	}
	return lines
}

// With [metrics] listen, a real agent serves /metrics, and a teardown
// that ignores SIGTERM and is killed shows as such.
func TestMetricsEndpoint(t *testing.T) {
	addr := freeAddr(t)
	n := startNode(t, nodeOpts{grace: "2s", killWait: "1s", metricsListen: addr})
	if m := scrape(t, addr); !m[`gracewatch_agent_node_state{state="up"} 1`] || !m[`gracewatch_agent_teardowns_total{outcome="killed"} 0`] {
		t.Fatalf("a fresh agent's metrics: %v", m)
	}
	n.jobStart("109", time.Now().Add(time.Hour))
	ep := n.epilog("109", "sh", "-c", "trap '' TERM; exec sleep 300")
	waitExit(t, ep, 10*time.Second)
	st := n.waitFor("released", 5*time.Second, func(st api.Status) bool { return st.Jobs[0].Phase == api.PhaseReleased })
	if st.Jobs[0].Outcome != diagnose.OutcomeKilled {
		t.Fatalf("outcome %q, want killed", st.Jobs[0].Outcome)
	}
	m := scrape(t, addr)
	for _, want := range []string{
		`gracewatch_agent_jobs_registered_total 1`,
		`gracewatch_agent_grace_violations_total 1`,
		`gracewatch_agent_teardowns_total{outcome="killed"} 1`,
		`gracewatch_agent_teardowns_total{outcome="clean"} 0`,
		`gracewatch_agent_escalations_total{signal="SIGTERM"} 1`,
		`gracewatch_agent_escalations_total{signal="SIGKILL"} 1`,
		`gracewatch_agent_epilogues_total{result="signaled"} 1`,
		`gracewatch_agent_teardown_duration_seconds_count 1`,
		`gracewatch_agent_node_state{state="down"} 1`,
		`gracewatch_agent_down_latched 1`,
		`gracewatch_agent_active_teardowns 0`,
		`gracewatch_agent_proc_blocked_reads 0`,
	} {
		if !m[want] {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	var build bool
	for l := range m {
		build = build || strings.HasPrefix(l, `gracewatch_build_info{`) && strings.Contains(l, `program="nodeagent"`)
	}
	if !build {
		t.Error("/metrics lacks gracewatch_build_info of the nodeagent")
	}
	if t.Failed() {
		t.Logf("logs:\n%s", n.logs)
	}
}
