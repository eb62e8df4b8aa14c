package httpapi

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gracewatch/gracewatch/internal/clock"
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
