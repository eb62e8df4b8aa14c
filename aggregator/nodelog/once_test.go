package nodelog

import (
	"testing"
	"time"
)

// Each name is told once within the bound; past it, one line a minute
// counts the rest.
func TestOnce(t *testing.T) {
	o := NewOnce(2, time.Minute)
	t0 := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	type step struct {
		name  string
		at    time.Duration
		first bool
		count int
	}
	for i, s := range []step{
		{"a", 0, true, 0}, {"a", 0, false, 0}, {"b", 0, true, 0},
		{"c", 0, false, 1}, // past the bound: counted at once, the first time
		{"d", time.Second, false, 0}, {"c", 2 * time.Second, false, 0},
		{"e", time.Minute, false, 3}, {"a", time.Hour, false, 0},
	} {
		if first, count := o.Allow(s.name, t0.Add(s.at)); first != s.first || count != s.count {
			t.Errorf("step %d (%s): %v %d, want %v %d", i, s.name, first, count, s.first, s.count)
		}
	}
}

func TestText(t *testing.T) {
	long := string(make([]byte, 600))
	if got := Text(long); len(got) != 512+len("…") {
		t.Errorf("cut to %d bytes", len(got))
	}
	if got := Text("short"); got != "short" {
		t.Errorf("Text(short) = %q", got)
	}
}
