package agent

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gracewatch/gracewatch/agent/diagnose"
	"github.com/gracewatch/gracewatch/agent/procfs"
	"github.com/gracewatch/gracewatch/agent/teardown"
	"github.com/gracewatch/gracewatch/internal/config"
	"github.com/gracewatch/gracewatch/internal/hostinfo"
	"github.com/gracewatch/gracewatch/internal/metrics"
	"github.com/gracewatch/gracewatch/internal/metrics/metricstest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// testMetrics returns the agent's metrics in a registry of their own, with
// a /proc reader over a fixture tree that has served one read.
func testMetrics(t *testing.T) (*agentMetrics, *procfs.Reader) {
	t.Helper()
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "stat"), []byte("cpu 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	proc := procfs.NewReader(root, time.Second, 16)
	if _, err := proc.ReadFile(context.Background(), "stat"); err != nil {
		t.Fatal(err)
	}
	// A state dir 97% full (the full-disk alert's rule fires below 5% free).
	host := func(context.Context) hostinfo.Facts {
		return hostinfo.Facts{StateDir: "/var/lib/gracewatch", StateDirFreeBytes: 3 << 30, StateDirSizeBytes: 100 << 30}
	}
	return newAgentMetrics(metrics.NewRegistry(metrics.ProgramNodeagent), proc, 16, host), proc
}

// A day of a node, as the supervisor tells it through its hooks: job 1
// ends cleanly, job 2 ignores SIGTERM and is killed, job 3 hangs
// unkillable and keeps the node DOWN; four epilogues end in the four ways.
func TestMetricsGolden(t *testing.T) {
	m, _ := testMetrics(t)
	d := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	job := func(id string, phase teardown.Phase) teardown.Job {
		return teardown.Job{ID: id, Phase: phase, Deadline: d}
	}
	events := []any{
		teardown.Event{Kind: teardown.EventRegistered, Job: "1"},
		teardown.Event{Kind: teardown.EventRegistered, Job: "2"},
		teardown.Event{Kind: teardown.EventRegistered, Job: "3"},
		teardown.Status{State: teardown.StateTeardown, FreeAt: d, Jobs: []teardown.Job{job("1", teardown.PhaseTeardown), job("2", teardown.PhaseTeardown)}},
		teardown.Event{Kind: teardown.EventEpilogExited, Job: "1", Status: 0},
		teardown.Event{Kind: teardown.EventReleased, Job: "1", Outcome: "clean", Duration: 2500 * time.Millisecond},
		teardown.Event{Kind: teardown.EventOverdue, Job: "2"},
		teardown.Event{Kind: teardown.EventGraceMismatch, Job: "2"},
		teardown.Status{State: teardown.StateDown, Jobs: []teardown.Job{job("1", teardown.PhaseReleased), job("2", teardown.PhaseOverdue)},
			Hung: []teardown.Hung{{Job: "2", PID: 7, Class: string(diagnose.Missed)}}},
		teardown.Event{Kind: teardown.EventEscalation, Job: "2", Signal: "SIGTERM"},
		teardown.Event{Kind: teardown.EventEscalation, Job: "2", Signal: "SIGKILL"},
		teardown.Event{Kind: teardown.EventEpilogExited, Job: "2", Status: 137, Signaled: true},
		teardown.Event{Kind: teardown.EventReleased, Job: "2", Outcome: diagnose.OutcomeKilled, Duration: 75 * time.Second},
		teardown.Event{Kind: teardown.EventEpilogStartError, Job: "3", Err: errors.New("no cgroup")},
		teardown.Event{Kind: teardown.EventStateWriteError, Err: errors.New("write state.json: no space left on device")},
		teardown.Event{Kind: teardown.EventEpilogExited, Job: "3", Status: 1},
		teardown.Event{Kind: teardown.EventOverdue, Job: "3"},
		teardown.Event{Kind: teardown.EventEscalation, Job: "3", Signal: "SIGTERM"},
		teardown.Event{Kind: teardown.EventEscalation, Job: "3", Signal: "SIGKILL"},
		teardown.Status{State: teardown.StateDown, Reason: "job 3 teardown exceeded grace 2m0s",
			Jobs: []teardown.Job{job("1", teardown.PhaseReleased), job("2", teardown.PhaseReleased), job("3", teardown.PhaseOverdue)},
			Hung: []teardown.Hung{
				{Job: "3", PID: 11, Class: string(diagnose.Unkillable)},
				{Job: "3", PID: 12, Class: string(diagnose.Unkillable)},
				{Job: "3", PID: 13, Class: string(diagnose.Zombie)},
			}},
	}
	for _, e := range events {
		switch e := e.(type) {
		case teardown.Status:
			m.onChange(e)
		case teardown.Event:
			m.onEvent(e)
		}
	}
	// Job 3 is overdue since D = d (grace 0 here): 50 s old at the scrape.
	m.running.now = func() time.Time { return d.Add(50 * time.Second) }
	got := metricstest.Scrape(t, metrics.Handler(m.reg, nil))
	metricstest.Golden(t, filepath.Join("testdata", "metrics.golden"), got, *update)
	metricstest.Lint(t, m.reg)
	metricstest.LintCollectors(t, m.collectors()...)
}

// The gauges follow the latest status: the hung processes and the latch
// go back to 0 when the node is resumed and the processes are gone.
func TestMetricsGaugesFollowStatus(t *testing.T) {
	m, proc := testMetrics(t)
	m.onChange(teardown.Status{State: teardown.StateDown, Jobs: []teardown.Job{{ID: "1", Phase: teardown.PhaseOverdue}},
		Hung: []teardown.Hung{{Job: "1", Class: string(diagnose.Unkillable)}}})
	check := func(what string, got, want float64) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	check("hung{unkillable}", testutil.ToFloat64(m.hung.WithLabelValues("unkillable")), 1)
	check("down_latched", testutil.ToFloat64(m.downLatched), 1)
	check("active_teardowns", testutil.ToFloat64(m.activeTeardowns), 1)
	m.onChange(teardown.Status{State: teardown.StateUp, Jobs: []teardown.Job{{ID: "1", Phase: teardown.PhaseReleased}}})
	check("hung{unkillable}", testutil.ToFloat64(m.hung.WithLabelValues("unkillable")), 0)
	check("down_latched", testutil.ToFloat64(m.downLatched), 0)
	check("active_teardowns", testutil.ToFloat64(m.activeTeardowns), 0)
	check("node_state{up}", testutil.ToFloat64(m.nodeState.WithLabelValues("up")), 1)
	check("node_state{down}", testutil.ToFloat64(m.nodeState.WithLabelValues("down")), 0)
	// The /proc counters are read at scrape time.
	if _, err := proc.ReadFile(context.Background(), "missing"); err == nil {
		t.Fatal("read of a missing file succeeded")
	}
	want := `# HELP gracewatch_agent_proc_reads_total Reads of /proc started for diagnostics.
# TYPE gracewatch_agent_proc_reads_total counter
gracewatch_agent_proc_reads_total 2
`
	if err := testutil.CollectAndCompare(newProcCollector(proc, 16), strings.NewReader(want), "gracewatch_agent_proc_reads_total"); err != nil {
		t.Error(err)
	}
}

func TestMetricsListenConfig(t *testing.T) {
	for _, tc := range []struct {
		listen string
		ok     bool
	}{
		{"", true},
		{"127.0.0.1:9470", true},
		{":9470", true},
		{"[::1]:9470", true},
		{"localhost:9470", true},
		{"127.0.0.1", false},
		{"127.0.0.1:0", false},
		{"127.0.0.1:http", false},
		{"127.0.0.1:70000", false},
		{"127.0.0.1:", false},
	} {
		t.Run(tc.listen, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.NodeName = "n1"
			cfg.Metrics.Listen = tc.listen
			err := cfg.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok %v", err, tc.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "metrics.listen") {
				t.Fatalf("error %q does not name the key", err)
			}
		})
	}
	// The key decodes from the [metrics] table, strictly.
	path := filepath.Join(t.TempDir(), "nodeagent.toml")
	cfg := DefaultConfig()
	if err := config.Decode(path, []byte("[metrics]\nlisten = \"127.0.0.1:9470\"\n"), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Metrics.Listen != "127.0.0.1:9470" {
		t.Fatalf("metrics.listen = %q", cfg.Metrics.Listen)
	}
	if DefaultConfig().Metrics.Listen != "" {
		t.Fatal("metrics are served by default")
	}
}
