package probe

import (
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/mesh"
)

func TestWaitFor(t *testing.T) {
	for _, c := range []struct{ allowance, want time.Duration }{
		{0, minWait}, {time.Second, 500 * time.Millisecond}, {5 * time.Second, maxWait}, {time.Hour, maxWait},
	} {
		if got := WaitFor(c.allowance); got != c.want {
			t.Errorf("WaitFor(%v) = %v, want %v", c.allowance, got, c.want)
		}
	}
}

// A node memberlist says is gone is asked at once, then (answered) every
// ReachedFor/3 while it is held, once a minute past it, and no more once
// it is alive again; an unanswered probe marks the input, an answer is
// told once per episode.
func TestScheduleGone(t *testing.T) {
	p := view.Policy{ClockSkewAllowance: 5 * time.Second, ProbeWait: time.Second, ReachedFor: DefaultReachedFor}
	s := NewSchedule(p)
	t0 := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	in := &view.NodeInput{Name: "n1", Role: view.RoleAgent, Status: mesh.StatusDead, StatusSince: t0}
	if why, ask := s.Schedule("n1", in, t0); !ask || why != Gone {
		t.Fatalf("Schedule = %q %v, want gone, ask", why, ask)
	}
	if _, ask := s.Schedule("n1", in, t0); ask {
		t.Fatal("asked again while in flight")
	}
	changed, rescued := s.Done("n1", true, t0.Add(100*time.Millisecond), in)
	if !changed || !rescued {
		t.Errorf("Done = %v %v, want changed, rescued", changed, rescued)
	}
	in.Reached = t0.Add(100 * time.Millisecond)
	if _, ask := s.Schedule("n1", in, t0.Add(time.Second)); ask {
		t.Fatal("asked again before ReachedFor/3")
	}
	if at := s.Due()["n1"]; !at.Equal(t0.Add(DefaultReachedFor / 3)) {
		t.Errorf("due %v, want %v", at, t0.Add(DefaultReachedFor/3))
	}
	if why, ask := s.Schedule("n1", in, t0.Add(DefaultReachedFor/3)); !ask || why != Gone {
		t.Fatalf("at ReachedFor/3: %q %v, want gone, ask", why, ask)
	}
	if _, rescued := s.Done("n1", true, t0.Add(DefaultReachedFor/3), in); rescued {
		t.Error("told twice in one episode")
	}
	if _, ask := s.Schedule("n1", in, t0.Add(DefaultReachedFor/3)); ask {
		t.Error("asked again at once")
	}
	// Past its hold (ReachedFor after the last answer), once a minute.
	failed := t0.Add(DefaultReachedFor/3 + goneEvery)
	if _, ask := s.Schedule("n1", in, failed.Add(-time.Millisecond)); ask {
		t.Error("asked again within a minute, past the hold")
	}
	if why, ask := s.Schedule("n1", in, failed); !ask || why != Gone {
		t.Fatalf("a minute later: %q %v, want gone, ask", why, ask)
	}
	if changed, _ := s.Done("n1", false, failed, in); !changed || !in.ProbeFailed.Equal(failed) {
		t.Errorf("unanswered probe: changed %v, ProbeFailed %v", changed, in.ProbeFailed)
	}
	in.Status = mesh.StatusAlive
	if _, ask := s.Schedule("n1", in, failed.Add(time.Hour)); ask || len(s.Due()) != 0 {
		t.Errorf("an alive node asked or due: %v", s.Due())
	}
	s.Forget("n1")
	if changed, _ := s.Done("n1", true, failed, nil); changed {
		t.Error("a forgotten node changed")
	}
}

// Without ProbeWait nothing is asked.
func TestScheduleOff(t *testing.T) {
	s := NewSchedule(view.Policy{})
	in := &view.NodeInput{Name: "n1", Status: mesh.StatusDead, StatusSince: time.Now()}
	if _, ask := s.Schedule("n1", in, time.Now()); ask || len(s.Due()) != 0 {
		t.Error("a probe without ProbeWait")
	}
}
