package metrics_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gracewatch/gracewatch/internal/metrics"
	"github.com/gracewatch/gracewatch/internal/metrics/metricstest"
	"github.com/gracewatch/gracewatch/internal/version"
)

func TestRegistry(t *testing.T) {
	reg := metrics.NewRegistry(metrics.ProgramNodeagent)
	want := `# HELP gracewatch_build_info Always 1; the labels name the gracewatch version, the Go version it was built with, and the program.
# TYPE gracewatch_build_info gauge
gracewatch_build_info{goversion="` + runtime.Version() + `",program="nodeagent",version="` + version.Version + `"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "gracewatch_build_info"); err != nil {
		t.Error(err)
	}
	n, err := testutil.GatherAndCount(reg)
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Errorf("%d metrics: the Go and process collectors are missing", n)
	}
	metricstest.Lint(t, reg)
	if problems, err := testutil.CollectAndLint(metrics.BuildInfo(metrics.ProgramAggregator)); err != nil || len(problems) > 0 {
		t.Errorf("build_info lint: %v %v", problems, err)
	}
	// The handler serves gracewatch_ families; the filter keeps only
	// those, with the build's labels as placeholders.
	got := string(metricstest.Scrape(t, metrics.Handler(reg, nil)))
	wantFiltered := strings.NewReplacer(runtime.Version(), "GOVERSION", `version="`+version.Version, `version="VERSION`).Replace(want)
	if got != wantFiltered {
		t.Errorf("filtered scrape:\n%s\nwant:\n%s", got, wantFiltered)
	}
}
