package modes

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/nodelog"
	"github.com/gracewatch/gracewatch/internal/config"
	"github.com/gracewatch/gracewatch/internal/testutil"
)

// The count follows the nodes' moves; the cluster is mixed while one node
// runs in another mode than the aggregator's, and the lines about it come
// at most once every ClusterLogEvery, the changes between them held and
// reported as suppressed.
func TestCountAndLines(t *testing.T) {
	logs := &testutil.SyncBuffer{}
	held := 0
	m := New(Name(false), slog.New(slog.NewTextHandler(logs, nil)), func() { held++ })
	now := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	m.Move("", config.ModeEnforce)
	m.Move("", config.ModeEnforce)
	m.LogMixed(now)
	if m.Mixed() || logs.String() != "" {
		t.Fatalf("mixed %v, log %q: want one mode, no line", m.Mixed(), logs)
	}
	m.Move(config.ModeEnforce, config.ModeObserve)
	m.LogMixed(now)
	nodes, mixed, split := m.State()
	if !mixed || nodes[config.ModeObserve] != 1 || split != "1 enforce, 1 observe" {
		t.Fatalf("state %v %v %q", nodes, mixed, split)
	}
	// Back and forth within the interval: held, then told once it is over.
	m.Move(config.ModeObserve, config.ModeEnforce)
	m.LogMixed(now.Add(time.Second))
	m.Move(config.ModeEnforce, config.ModeObserve)
	m.LogMixed(now.Add(2 * time.Second))
	m.Move(config.ModeObserve, "")
	m.LogMixed(now.Add(3 * time.Second))
	if held != 3 || m.LineDue() != now.Add(nodelog.ClusterLogEvery) {
		t.Fatalf("held %d, due %v", held, m.LineDue())
	}
	m.LogMixed(m.LineDue())
	out := logs.String()
	if strings.Count(out, "mixed modes") != 1 || !strings.Contains(out, "one mode again") || !strings.Contains(out, "suppressed=3") {
		t.Errorf("log:\n%s", out)
	}
	if !m.LineDue().IsZero() {
		t.Errorf("a line still due at %v", m.LineDue())
	}
}
