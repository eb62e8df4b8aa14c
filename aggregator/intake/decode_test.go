package intake

import (
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/config"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// t0 is the tests' time; at(d) is d after it, ms(t) t in Unix
// milliseconds as the wire carries it.
var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func ms(t time.Time) int64 { return t.UnixMilli() }

// fullUpdate is a StateUpdate with every field set to a valid value.
func fullUpdate() *gwpb.StateUpdate {
	deadline := at(2 * time.Minute)
	cause := func(fs string) *gwpb.Cause {
		return &gwpb.Cause{Fstype: fs, Source: "srv:/vol", Mountpoint: "/scratch", Wchan: "request_wait_answer", Class: "unkillable",
			Unkillable: 1, ExitHang: 2, KillableD: 3, Missed: 4, Dying: 5, Zombie: 6, ExamplePid: 42, ExampleComm: "cat", Job: "7"}
	}
	meta := &gwpb.Meta{Schema: 1, Role: gwpb.Role_ROLE_AGENT, Incarnation: 3, Seq: 9, State: gwpb.State_STATE_DOWN,
		SinceMs: ms(at(time.Minute)), Reason: "job 7 hung"}
	meta.FreeAtMs, meta.DeadlineMs = ms(deadline), ms(deadline)
	return &gwpb.StateUpdate{Meta: meta, Reason: "job 7 hung (full)", StartedMs: ms(t0),
		Teardowns: []*gwpb.Teardown{
			{Job: "7", Phase: "overdue", EndedMs: ms(t0), DeadlineMs: ms(deadline), ExpirationMs: ms(at(time.Minute)), GraceMs: 120000,
				Outcome: "hung", ReleasedMs: ms(at(3 * time.Minute)), User: "alice", Command: "cat"},
		},
		Reports: []*gwpb.Report{{Job: "7", Stage: "after-escalation", Outcome: "hung", Summary: "1 unkillable",
			TakenMs: ms(deadline), DetailJson: []byte(`{"job":"7"}`)}},
		Cause: cause("fuse"), Clean: true, AdminDrain: true, Mode: gwpb.Mode_MODE_OBSERVE, ObservedCause: cause("nfs"),
		KillPathFloorMs: 95000, KillPath: "slurm: OverTimeLimit 0 + 30 s + KillWait 60 s + 5 s"}
}

// zeroFields returns the path of every field of v (recursively through
// pointers, structs and the first element of slices) that is zero.
func zeroFields(v reflect.Value, path string) []string {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return []string{path}
		}
		return zeroFields(v.Elem(), path)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			if v.Interface().(time.Time).IsZero() {
				return []string{path}
			}
			return nil
		}
		var zero []string
		for i := range v.NumField() {
			zero = append(zero, zeroFields(v.Field(i), path+"."+v.Type().Field(i).Name)...)
		}
		return zero
	case reflect.Slice:
		if v.Len() == 0 {
			return []string{path}
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return nil
		}
		return zeroFields(v.Index(0), path+"[0]")
	case reflect.Array:
		for i := range v.Len() {
			if v.Index(i).IsZero() {
				return []string{path + "[" + strconv.Itoa(i) + "]"}
			}
		}
		return nil
	}
	if v.IsZero() {
		return []string{path}
	}
	return nil
}

// The intake decodes every field of a StateUpdate into the internal node
// input (a field added to both and not decoded is lost to the view), and a
// Handover's encoding of that input decodes to the same input: the
// aggregator that adopts a gone node serves it as the one that saw it go.
func TestDecodeCarriesEveryField(t *testing.T) {
	u := DecodeUpdate(BoundUpdate(fullUpdate()))
	if zero := zeroFields(reflect.ValueOf(u), "NodeUpdate"); len(zero) > 0 {
		t.Errorf("DecodeUpdate left fields unset: %v", zero)
	}
	if u.Mode != config.ModeObserve || u.Meta.State != view.AgentDown || u.KillPathFloor != 95*time.Second ||
		u.Teardowns[0].Grace != 2*time.Minute || u.Cause.Counts[5] != 6 || u.ObservedCause.FSType != "nfs" {
		t.Errorf("decoded %+v", u)
	}
	again := DecodeUpdate(BoundUpdate(EncodeUpdate(u)))
	if !reflect.DeepEqual(again, u) {
		t.Errorf("a handover's encoding changed the input:\n got %+v\nwant %+v", again, u)
	}
	if m := DecodeMeta(EncodeMeta(u.Meta)); !reflect.DeepEqual(m, u.Meta) {
		t.Errorf("a handover's encoding changed the meta:\n got %+v\nwant %+v", m, u.Meta)
	}
	if DecodeUpdate(&gwpb.StateUpdate{}) != nil || DecodeUpdate(nil) != nil || DecodeMeta(nil) != nil || EncodeUpdate(nil) != nil {
		t.Error("an update without meta decoded to an input")
	}
}

// What the wire may carry and the view must not see is dropped once, at
// the decoding: values out of range, a cause that breaks its bounds, a
// user or command that breaks the proto's rule, a detail that is not JSON,
// a mode this build does not know.
func TestDecodeDropsInvalidInput(t *testing.T) {
	w := fullUpdate()
	w.Meta.SinceMs, w.Meta.FreeAtMs = -1, 1<<62
	w.Teardowns[0].GraceMs, w.Teardowns[0].ReleasedMs = -5, 1<<62
	w.Teardowns[0].User, w.Teardowns[0].Command = "root;reboot", "a\x1b[2Jb"
	w.Reports[0].DetailJson = []byte("{")
	w.Cause.Wchan, w.Cause.Class = "a\x00b", "worst"
	w.ObservedCause = &gwpb.Cause{}
	w.Mode = gwpb.Mode(9)
	w.KillPathFloorMs = 1 << 62
	u := DecodeUpdate(BoundUpdate(w))
	td := u.Teardowns[0]
	switch {
	case !u.Meta.Since.IsZero() || !u.Meta.FreeAt.IsZero():
		t.Errorf("times out of range kept: %+v", u.Meta)
	case td.Grace != 0 || !td.Released.IsZero() || td.User != "" || td.Command != "":
		t.Errorf("teardown kept invalid fields: %+v", td)
	case u.Reports[0].Detail != nil:
		t.Errorf("detail that is not JSON kept: %q", u.Reports[0].Detail)
	case u.Cause != nil || u.ObservedCause != nil:
		t.Errorf("invalid causes kept: %+v %+v", u.Cause, u.ObservedCause)
	case u.Mode != config.ModeEnforce:
		t.Errorf("unknown mode decoded as %q, want enforce", u.Mode)
	case u.KillPathFloor != 0:
		t.Errorf("kill-path floor out of range kept: %v", u.KillPathFloor)
	}
}

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

// The strangers are bounded: MaxUnseenNodes known from their messages
// (unless unbounded), and the room of the adoptions shrinks by what is
// adopted and grows by what the mesh tells of.
func TestStrangers(t *testing.T) {
	s := NewStrangers()
	for i := range MaxUnseenNodes {
		if !s.Unseen("n"+strconv.Itoa(i), true) {
			t.Fatalf("node %d refused", i)
		}
	}
	if s.Unseen("over", true) || !s.Unseen("proven", false) {
		t.Error("the bound of the unseen nodes")
	}
	s.Seen("n0")
	s.Seen("proven")
	if !s.Unseen("again", true) {
		t.Error("a node told of by the mesh still counts as unseen")
	}
	s.Adopt(map[string]int{"g1": 100, "g2": 50})
	if gone, bytes := s.Room(); gone != MaxAdoptedGone-2 || bytes != MaxAdoptedBytes-150 {
		t.Errorf("room %d, %d", gone, bytes)
	}
	s.Seen("g1")
	if gone, bytes := s.Adopted(); gone != 1 || bytes != 50 {
		t.Errorf("adopted %d, %d: want g2 alone", gone, bytes)
	}
}
