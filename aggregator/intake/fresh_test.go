package intake

import (
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// A message passes within the allowance and the longest delivery behind,
// and within MaxClockAhead ahead; a replay, a clock too far ahead, an
// agent start in the future and, when proven, no send time are refused
// with their label.
func TestFresh(t *testing.T) {
	now := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	allowance := 5 * time.Second
	env := func(sent time.Time, started time.Time) *gwpb.Envelope {
		e := &gwpb.Envelope{Body: &gwpb.Envelope_State{State: &gwpb.StateUpdate{StartedMs: started.UnixMilli()}}}
		if !sent.IsZero() {
			e.SentMs = sent.UnixMilli()
		}
		return e
	}
	past := now.Add(-time.Hour)
	for _, c := range []struct {
		name   string
		env    *gwpb.Envelope
		proven bool
		what   string
		offset time.Duration
	}{
		{"now", env(now, past), true, "", 0},
		{"behind by the window", env(now.Add(-allowance-mesh.MaxDelivery), past), true, "", allowance + mesh.MaxDelivery},
		{"replayed", env(now.Add(-allowance-mesh.MaxDelivery-time.Millisecond), past), true, "stale", allowance + mesh.MaxDelivery + time.Millisecond},
		{"ahead, heard", env(now.Add(MaxClockAhead), past), true, "", -MaxClockAhead},
		{"too far ahead", env(now.Add(MaxClockAhead+time.Millisecond), past), true, "stale", -MaxClockAhead - time.Millisecond},
		{"started in the future", env(now, now.Add(time.Minute)), true, "future_start", 0},
		{"no send time, proven", env(time.Time{}, past), true, "stale", 0},
		{"no send time, unproven", env(time.Time{}, past), false, "", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			offset, what, why := Fresh(c.env, now, allowance, c.proven)
			if what != c.what || offset != c.offset || (what == "") != (why == "") {
				t.Errorf("Fresh = %v, %q, %q; want %v, %q", offset, what, why, c.offset, c.what)
			}
		})
	}
}

// A later agent start replaces an earlier one's updates whatever their
// order; within one start the newer (incarnation, seq) wins, and of the
// same, the later report.
func TestReplacesUpdate(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	upd := func(started int64, inc, seq uint64, taken time.Time) *view.NodeUpdate {
		u := &view.NodeUpdate{StartedMs: started, Meta: &view.NodeMeta{Incarnation: inc, Seq: seq}}
		if !taken.IsZero() {
			u.Reports = []view.Report{{Taken: taken}}
		}
		return u
	}
	for _, c := range []struct {
		name   string
		old, u *view.NodeUpdate
		want   bool
	}{
		{"first", nil, upd(1, 1, 1, time.Time{}), true},
		{"newer seq", upd(1, 1, 1, time.Time{}), upd(1, 1, 2, time.Time{}), true},
		{"older seq", upd(1, 1, 2, time.Time{}), upd(1, 1, 1, time.Time{}), false},
		{"later start, lower incarnation", upd(1, 5, 9, time.Time{}), upd(2, 1, 1, time.Time{}), true},
		{"earlier start, higher incarnation", upd(2, 1, 1, time.Time{}), upd(1, 5, 9, time.Time{}), false},
		{"same, later report", upd(1, 1, 1, t0), upd(1, 1, 1, t0.Add(time.Second)), true},
		{"same, earlier report", upd(1, 1, 1, t0), upd(1, 1, 1, t0.Add(-time.Second)), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := ReplacesUpdate(c.old, c.u); got != c.want {
				t.Errorf("ReplacesUpdate = %v, want %v", got, c.want)
			}
			if got, want := RestartedSince(c.old, c.u), c.old != nil && c.u.StartedMs > c.old.StartedMs; got != want {
				t.Errorf("RestartedSince = %v, want %v", got, want)
			}
		})
	}
}
