package metrics_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gracewatch/gracewatch/internal/hostinfo"
	"github.com/gracewatch/gracewatch/internal/metrics"
)

func TestStateDirCollector(t *testing.T) {
	facts := hostinfo.Facts{StateDirFreeBytes: 5 << 20, StateDirSizeBytes: 100 << 20}
	c := metrics.NewStateDirCollector("agent", func(context.Context) hostinfo.Facts { return facts })
	want := `# HELP gracewatch_agent_state_dir_free_bytes Free bytes of the file system of the state dir, for an unprivileged writer (statfs f_bavail).
# TYPE gracewatch_agent_state_dir_free_bytes gauge
gracewatch_agent_state_dir_free_bytes 5.24288e+06
# HELP gracewatch_agent_state_dir_read_ok 1 when the state dir's free space could be read at this scrape, else 0.
# TYPE gracewatch_agent_state_dir_read_ok gauge
gracewatch_agent_state_dir_read_ok 1
# HELP gracewatch_agent_state_dir_size_bytes Size in bytes of the file system of the state dir.
# TYPE gracewatch_agent_state_dir_size_bytes gauge
gracewatch_agent_state_dir_size_bytes 1.048576e+08
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	// Unreadable: no space series, read_ok 0.
	facts = hostinfo.Facts{Errors: []string{"state dir space unreadable: blocked"}}
	if n := testutil.CollectAndCount(c); n != 1 {
		t.Errorf("unreadable: %d series, want read_ok alone", n)
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(`# HELP gracewatch_agent_state_dir_read_ok 1 when the state dir's free space could be read at this scrape, else 0.
# TYPE gracewatch_agent_state_dir_read_ok gauge
gracewatch_agent_state_dir_read_ok 0
`)); err != nil {
		t.Error(err)
	}
}

// With the real reader, a real directory has a size.
func TestStateDirCollectorReal(t *testing.T) {
	r := hostinfo.NewReader(hostinfo.Options{StateDir: t.TempDir()})
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewStateDirCollector("aggregator", r.Read))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf.GetMetric()[0].GetGauge().GetValue()
	}
	if got["gracewatch_aggregator_state_dir_read_ok"] != 1 || got["gracewatch_aggregator_state_dir_size_bytes"] <= 0 {
		t.Errorf("gathered %v", got)
	}
}
