// Package metricstest compares gracewatch's /metrics output with golden
// files. Only the gracewatch_ families are compared: the Go runtime's and
// the process's metrics vary from run to run, and so do build_info's
// version and goversion labels, which are replaced by placeholders.
package metricstest

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/gracewatch/gracewatch/internal/metrics"
	gwtest "github.com/gracewatch/gracewatch/internal/testutil"
)

var buildLabels = regexp.MustCompile(`\b(version|goversion)="[^"]*"`)

// Filter keeps the lines of gracewatch_ families of an exposition in the
// text format (HELP, TYPE and samples), with build_info's version labels
// replaced by placeholders.
func Filter(text []byte) []byte {
	prefix := metrics.Namespace + "_"
	var out bytes.Buffer
	for line := range strings.Lines(string(text)) {
		name := line
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name = rest
		} else if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name = rest
		}
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		if strings.HasPrefix(name, prefix+"build_info") {
			line = buildLabels.ReplaceAllStringFunc(line, func(m string) string {
				k, _, _ := strings.Cut(m, "=")
				return k + `="` + strings.ToUpper(k) + `"`
			})
		}
		out.WriteString(line)
	}
	return out.Bytes()
}

// Scrape gets h's /metrics in the text format, as Prometheus would, and
// returns the body (filtered by Filter).
func Scrape(t testing.TB, h http.Handler) []byte {
	t.Helper()
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Accept", "text/plain")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	return Filter(rec.Body.Bytes())
}

// ScrapeURL gets url (a /metrics endpoint) over HTTP with the given headers
// and returns the body (filtered by Filter).
func ScrapeURL(t testing.TB, url string, header http.Header) []byte {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("GET %s: Content-Type %q, want text/plain", url, ct)
	}
	return Filter(body)
}

// Golden compares got with the golden file at path, or rewrites it with
// update: internal/testutil's Golden, which the diagnostics report tests
// use too.
func Golden(t testing.TB, path string, got []byte, update bool) {
	t.Helper()
	gwtest.Golden(t, path, got, update)
}

// Lint fails t with every problem promlint finds in g's metrics (all of
// them, the Go runtime's and the process's included).
func Lint(t testing.TB, g prometheus.Gatherer) {
	t.Helper()
	problems, err := testutil.GatherAndLint(g)
	lintReport(t, problems, err)
}

// LintCollectors fails t with every problem promlint finds in each
// collector's metrics, each linted alone (a collector whose metrics are
// not registered yet, or registered beside others').
func LintCollectors(t testing.TB, cs ...prometheus.Collector) {
	t.Helper()
	for _, c := range cs {
		problems, err := testutil.CollectAndLint(c)
		lintReport(t, problems, err)
	}
}

func lintReport(t testing.TB, problems []promlint.Problem, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}
