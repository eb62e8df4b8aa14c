package mesh

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// capture is a slog.Handler that keeps records.
type capture struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (c *capture) Enabled(context.Context, slog.Level) bool { return true }
func (c *capture) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recs = append(c.recs, r)
	return nil
}
func (c *capture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *capture) WithGroup(string) slog.Handler      { return c }

func TestMemberlistLogLevels(t *testing.T) {
	c := &capture{}
	l := newStdLogger(slog.New(c))
	cases := []struct {
		line  string
		level slog.Level
		msg   string
	}{
		{"[DEBUG] memberlist: Stream connection from=127.0.0.1:5000", slog.LevelDebug, "Stream connection from=127.0.0.1:5000"},
		{"[INFO] memberlist: Suspect node-3 has failed", slog.LevelInfo, "Suspect node-3 has failed"},
		{"[WARN] memberlist: Refuting a dead message", slog.LevelWarn, "Refuting a dead message"},
		{"[ERR] memberlist: Conflicting address for node-1", slog.LevelError, "Conflicting address for node-1"},
		{"[ERROR] memberlist: x", slog.LevelError, "x"},
		{"no level here", slog.LevelInfo, "no level here"},
		{"[ODD] memberlist: y", slog.LevelInfo, "[ODD] memberlist: y"},
	}
	for _, tc := range cases {
		l.Print(tc.line)
	}
	if len(c.recs) != len(cases) {
		t.Fatalf("%d records for %d lines", len(c.recs), len(cases))
	}
	for i, tc := range cases {
		r := c.recs[i]
		if r.Level != tc.level || r.Message != tc.msg {
			t.Errorf("%q -> %v %q, want %v %q", tc.line, r.Level, r.Message, tc.level, tc.msg)
		}
	}
}

func TestLimiter(t *testing.T) {
	l := limiter{every: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	if ok, _ := l.allow("a", t0); !ok {
		t.Error("first a")
	}
	if ok, _ := l.allow("b", t0); !ok {
		t.Error("first b: limits are per sender")
	}
	for range 3 {
		if ok, _ := l.allow("a", t0.Add(time.Second)); ok {
			t.Error("a within the interval")
		}
	}
	if ok, n := l.allow("a", t0.Add(11*time.Second)); !ok || n != 3 {
		t.Errorf("a after the interval: %v, %d suppressed; want true, 3", ok, n)
	}
	for i := range limiterKeys + 5 {
		l.allow(string(rune('A'+i)), t0)
	}
	if len(l.seen) > limiterKeys {
		t.Errorf("%d keys kept, at most %d", len(l.seen), limiterKeys)
	}
}
