package httpapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/metrics"
	"github.com/gracewatch/gracewatch/internal/metrics/metricstest"
)

// TestMetricsLint: the server's requests family passes promlint, alone;
// a second server of the same registry reuses the counter already there.
func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	svc := newFakeService(clock.NewFake(t0))
	first := NewServer(svc, ServerOptions{Registry: reg})
	srv := NewServer(svc, ServerOptions{Registry: reg})
	if srv.requests != first.requests {
		t.Error("the second server registered a counter of its own")
	}
	metricstest.LintCollectors(t, srv.requests)
}

// /metrics is a read endpoint: with read_token it needs a token (package
// aggregator's TestTokenRules has it with the read token); without
// a registry there is none.
func TestMetricsAccess(t *testing.T) {
	h := newHarness(t)
	base := h.serve(ServerOptions{})
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("without a registry: %d, want 404", resp.StatusCode)
	}

	reg := metrics.NewRegistry(metrics.ProgramAggregator)
	h = newHarness(t)
	base = h.serve(ServerOptions{Registry: reg, Token: []byte(testToken), GuardReads: true})
	if r := call(t, "GET", base+"/metrics", "", ""); r.Status != 401 {
		t.Errorf("read_token without a token: %d, want 401", r.Status)
	}
	r := call(t, "GET", base+"/metrics", testToken, "")
	if r.Status != 200 || !strings.Contains(string(r.Body), `gracewatch_build_info{goversion=`) {
		t.Errorf("with the token: %d\n%s", r.Status, r.Body)
	}
	got := metricstest.ScrapeURL(t, base+"/metrics", http.Header{"Authorization": {"Bearer " + testToken}})
	for _, want := range []string{
		`gracewatch_aggregator_http_requests_total{code="401",method="GET",route="/metrics"} 1`,
		`gracewatch_aggregator_http_requests_total{code="200",method="GET",route="/metrics"} 1`,
	} {
		if !strings.Contains(string(got), want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
