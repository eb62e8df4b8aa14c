package packaging

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// The shipped alerting rules and their promtool unit tests.
var (
	alertRules     = filepath.Join("examples", "prometheus", "gracewatch-alerts.yml")
	alertRuleTests = filepath.Join("examples", "prometheus", "gracewatch-alerts.test.yml")
)

// The programs' exported metrics, as their golden tests keep them.
var goldenMetrics = []string{
	filepath.Join("..", "agent", "testdata", "metrics.golden"),
	filepath.Join("..", "aggregator", "testdata", "metrics.golden"),
}

// family is one exported metric family: its type and, per label name, the
// values seen in the golden files.
type family struct {
	typ    string
	labels map[string]map[string]bool
}

var (
	typeLine   = regexp.MustCompile(`^# TYPE (\S+) (\S+)$`)
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+$`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)
	// A gracewatch series name, with its matchers if it has any.
	selector = regexp.MustCompile(`\b(gracewatch_[a-z0-9_]+)(\{[^}]*\})?`)
)

// exported reads the golden files into their families.
func exported(t *testing.T) map[string]*family {
	t.Helper()
	fams := map[string]*family{}
	for _, path := range goldenMetrics {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := sc.Text()
			if m := typeLine.FindStringSubmatch(line); m != nil {
				fams[m[1]] = &family{typ: m[2], labels: map[string]map[string]bool{}}
				continue
			}
			m := sampleLine.FindStringSubmatch(line)
			if m == nil || strings.HasPrefix(line, "#") {
				continue
			}
			fam := familyOf(fams, m[1])
			if fam == nil {
				t.Fatalf("%s: sample %q of no family", path, line)
			}
			for _, lp := range labelPair.FindAllStringSubmatch(m[2], -1) {
				if fam.labels[lp[1]] == nil {
					fam.labels[lp[1]] = map[string]bool{}
				}
				fam.labels[lp[1]][lp[3]] = true
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return fams
}

// familyOf returns the family of a series name: itself, or a histogram's
// or summary's _bucket, _sum or _count.
func familyOf(fams map[string]*family, name string) *family {
	if f, ok := fams[name]; ok {
		return f
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if f, ok := fams[base]; ok && (f.typ == "histogram" || f.typ == "summary") {
				return f
			}
		}
	}
	return nil
}

// Every metric and label that the rules and their tests name is one the
// programs export: a renamed metric breaks this test, not the pager. The
// rules' exact matchers must name values that the programs give.
func TestAlertRulesUseExportedMetrics(t *testing.T) {
	fams := exported(t)
	// Labels Prometheus adds at scrape time.
	scrape := map[string]bool{"job": true, "instance": true}
	for _, path := range []string{alertRules, alertRuleTests} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for i, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "#") {
				continue
			}
			for _, m := range selector.FindAllStringSubmatch(line, -1) {
				n++
				fam := familyOf(fams, m[1])
				if fam == nil {
					t.Errorf("%s:%d: %s is not exported (not in %s)", path, i+1, m[1], strings.Join(goldenMetrics, ", "))
					continue
				}
				for _, lp := range labelPair.FindAllStringSubmatch(m[2], -1) {
					name, op, value := lp[1], lp[2], lp[3]
					values, ok := fam.labels[name]
					switch {
					case scrape[name]:
					case !ok:
						t.Errorf("%s:%d: %s has no label %s", path, i+1, m[1], name)
					case path == alertRules && op == "=" && !values[value]:
						t.Errorf("%s:%d: %s{%s=%q}: the programs give %s only %v", path, i+1, m[1], name, value, name, keys(values))
					}
				}
			}
		}
		if n == 0 {
			t.Errorf("%s names no gracewatch metric", path)
		}
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Every alert of the rules has a test case in which it fires and one in
// which it must not (exp_alerts: []).
func TestAlertRulesAllTested(t *testing.T) {
	rules, err := os.ReadFile(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(alertRuleTests)
	if err != nil {
		t.Fatal(err)
	}
	alerts := regexp.MustCompile(`(?m)^\s*- alert: (\S+)\s*$`).FindAllStringSubmatch(string(rules), -1)
	if len(alerts) < 6 {
		t.Fatalf("%d alerts in %s, want at least the six of issue 12", len(alerts), alertRules)
	}
	fires, silent := map[string]int{}, map[string]int{}
	current := ""
	for _, line := range strings.Split(string(tests), "\n") {
		l := strings.TrimSpace(line)
		if name, ok := strings.CutPrefix(l, "alertname: "); ok {
			current = name
			continue
		}
		if rest, ok := strings.CutPrefix(l, "exp_alerts:"); ok && current != "" {
			if strings.TrimSpace(rest) == "[]" {
				silent[current]++
			} else {
				fires[current]++
			}
			current = ""
		}
	}
	for _, a := range alerts {
		name := a[1]
		if fires[name] == 0 || silent[name] == 0 {
			t.Errorf("%s: %d cases that fire, %d that must not; want at least one of each in %s", name, fires[name], silent[name], alertRuleTests)
		}
	}
}

// promtool (Debian's prometheus package) checks the rules and runs their
// unit tests; `make alerts-test` runs the same. Outside CI, without
// promtool, this skips.
func TestAlertRulesPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	testutil.Require(t, err == nil, "needs promtool (apt-get install prometheus)")
	for _, args := range [][]string{{"check", "rules", alertRules}, {"test", "rules", alertRuleTests}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
