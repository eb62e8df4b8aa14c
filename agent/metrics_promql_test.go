package agent

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/teardown"
	"github.com/gracewatch/gracewatch/internal/metrics"
	"github.com/gracewatch/gracewatch/internal/metrics/metricstest"
	"github.com/gracewatch/gracewatch/internal/testutil"
)

// The operator's guide documents the PromQL that answers "how many
// teardowns over G" from the agents' metrics.
const promqlGuide = "../packaging/README.md"

// documentedQueries returns the ```promql blocks of the guide's section
// "Teardown durations in Prometheus".
func documentedQueries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(promqlGuide)
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Teardown durations in Prometheus\n")
	if !ok {
		t.Fatalf("%s: no section \"Teardown durations in Prometheus\"", promqlGuide)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	var qs []string
	for _, m := range regexp.MustCompile("(?s)```promql\n(.*?)\n```").FindAllStringSubmatch(sec, -1) {
		qs = append(qs, strings.TrimSpace(m[1]))
	}
	return qs
}

// sampleRe is one sample line of the text exposition.
var sampleRe = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$`)

// TestDocumentedPromQL evaluates every query of the guide's section with
// promtool on the real exposition of two agents: node17 released teardowns
// of 2, 30, 44, 46, 100 and 4,000 s and has two running, 10 and 50 s old;
// node18 released 20, 50 and 7,200 s and has one hung for 7,300 s. For
// G = 45 s that is 3 + 2 completed over G, 1 + 1 running over G; the 99th
// percentile of the nine completed lies in the bucket (5400, 7200]: rank
// 8.91 of 9, so 5400 + 1800 × 0.91 = 7038.
func TestDocumentedPromQL(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	testutil.Require(t, err == nil, "needs promtool (apt-get install prometheus)")
	want := map[string]string{
		`sum(increase(gracewatch_agent_teardown_duration_seconds_count[30d])) - sum(increase(gracewatch_agent_teardown_duration_seconds_bucket{le="45"}[30d]))`:                                                                                                                             "5",
		`sum(increase(gracewatch_agent_teardown_duration_seconds_count{instance="node17:9470"}[30d])) - sum(increase(gracewatch_agent_teardown_duration_seconds_bucket{instance="node17:9470",le="45"}[30d]))`:                                                                              "3",
		`histogram_quantile(0.99, sum by (le) (increase(gracewatch_agent_teardown_duration_seconds_bucket[30d])))`:                                                                                                                                                                          "7038",
		`sum(gracewatch_agent_teardown_running_seconds_count) - sum(gracewatch_agent_teardown_running_seconds_bucket{le="45"})`:                                                                                                                                                             "2",
		`(sum(increase(gracewatch_agent_teardown_duration_seconds_count[30d])) - sum(increase(gracewatch_agent_teardown_duration_seconds_bucket{le="45"}[30d]))) + (sum(gracewatch_agent_teardown_running_seconds_count) - sum(gracewatch_agent_teardown_running_seconds_bucket{le="45"}))`: "7",
	}
	docs := documentedQueries(t)
	if len(docs) != len(want) {
		t.Errorf("the guide documents %d queries, this test checks %d", len(docs), len(want))
	}
	for _, q := range docs {
		if _, ok := want[q]; !ok {
			t.Errorf("documented query not checked here: %s", q)
		}
	}

	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	scrape := func(done []time.Duration, running []time.Duration) []byte {
		m, _ := testMetrics(t)
		for _, d := range done {
			m.onEvent(teardown.Event{Kind: teardown.EventReleased, Outcome: "clean", Duration: d})
		}
		st := teardown.Status{State: teardown.StateTeardown}
		for i, age := range running {
			// Grace 30 s: deadline = base + 30 s, base = now - age.
			st.Jobs = append(st.Jobs, teardown.Job{ID: fmt.Sprint(i), Phase: teardown.PhaseTeardown, Grace: 30 * time.Second,
				Deadline: now.Add(-age + 30*time.Second)})
		}
		// A running job before its E and a released one count nowhere.
		st.Jobs = append(st.Jobs, teardown.Job{ID: "r", Phase: teardown.PhaseRunning, Grace: time.Minute, Deadline: now.Add(time.Hour)},
			teardown.Job{ID: "x", Phase: teardown.PhaseReleased, Grace: time.Minute, Deadline: now.Add(-time.Hour)})
		m.onChange(st)
		m.running.now = func() time.Time { return now }
		return metricstest.Scrape(t, metrics.Handler(m.reg, nil))
	}
	s := time.Second
	nodes := map[string][]byte{
		"node17:9470": scrape([]time.Duration{2 * s, 30 * s, 44 * s, 46 * s, 100 * s, 4000 * s}, []time.Duration{10 * s, 50 * s}),
		"node18:9470": scrape([]time.Duration{20 * s, 50 * s, 7200 * s}, []time.Duration{7300 * s}),
	}

	// The scrapes as promtool's input: the histogram's counters are 0 a
	// minute before the scrape (the teardowns came after), the running
	// snapshot holds its value; the queries are evaluated at the scrape.
	var y bytes.Buffer
	y.WriteString("rule_files: []\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n")
	series := 0
	for inst, text := range nodes {
		sc := bufio.NewScanner(bytes.NewReader(text))
		for sc.Scan() {
			m := sampleRe.FindStringSubmatch(sc.Text())
			if m == nil || !strings.HasPrefix(m[1], "gracewatch_agent_teardown_") {
				continue
			}
			labels := strings.TrimSuffix(strings.TrimPrefix(m[2], "{"), "}")
			if labels != "" {
				labels += ","
			}
			labels += fmt.Sprintf(`instance=%q,job="nodeagent"`, inst)
			values := "0 " + m[3]
			if strings.HasPrefix(m[1], "gracewatch_agent_teardown_running_seconds") {
				values = m[3] + " " + m[3]
			}
			fmt.Fprintf(&y, "      - series: '%s{%s}'\n        values: '%s'\n", m[1], labels, values)
			series++
		}
	}
	if series < 4*(len(teardownBuckets)+3) {
		t.Fatalf("only %d series of the teardown families in the scrapes", series)
	}
	y.WriteString("    promql_expr_test:\n")
	for _, q := range docs {
		if want[q] == "" {
			continue
		}
		fmt.Fprintf(&y, "      - expr: '%s'\n        eval_time: 1m\n        exp_samples:\n          - labels: '{}'\n            value: %s\n", q, want[q])
	}
	path := filepath.Join(t.TempDir(), "teardown-queries.test.yml")
	if err := os.WriteFile(path, y.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "test", "rules", path).CombinedOutput()
	if err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}
}
