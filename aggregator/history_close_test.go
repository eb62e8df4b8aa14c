package aggregator

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gracewatch/gracewatch/aggregator/history"
	"github.com/gracewatch/gracewatch/internal/clock"
)

// openUnder lists this process's open files under dir.
func openUnder(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	var out []string
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.HasPrefix(l, dir+"/") {
			out = append(out, l)
		}
	}
	return out
}

// TestNewClosesHistoryOnError: when New fails after opening the history
// (here its metrics clash in the registry), the history's files are not
// left open.
func TestNewClosesHistoryOnError(t *testing.T) {
	dir := t.TempDir()
	st, err := history.Open(history.Options{Dir: dir}, t0)
	if err != nil {
		t.Fatal(err)
	}
	st.Add(history.Record{Node: "n1", Job: []byte("1"), StartMs: t0.Add(-time.Hour).UnixMilli(), ReleasedMs: t0.Add(-time.Hour + time.Second).UnixMilli(),
		Outcome: history.OutcomeClean}, t0)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	clk := clock.NewFake(t0)
	o := Options{Name: "agg-1", Policy: defaultPolicy, Grace: 120 * time.Second, Clock: clk, Logger: testLogger(t), Registry: reg}
	if _, err := New(o); err != nil { // registers the families (no history)
		t.Fatal(err)
	}
	o.TeardownHistory = history.Options{Dir: dir}
	if _, err := New(o); err == nil {
		t.Fatal("New with clashing metrics succeeded")
	}
	if fds := openUnder(t, dir); len(fds) != 0 {
		t.Errorf("history files left open after New failed: %v", fds)
	}
}
