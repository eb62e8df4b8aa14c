package aggregator

import (
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/gracewatch/gracewatch/aggregator/incident"
	"github.com/gracewatch/gracewatch/aggregator/incidents"
	"github.com/gracewatch/gracewatch/aggregator/intake"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// FuzzIntakeCause feeds arbitrary StateUpdate bytes (with their cause,
// clean and admin_drain, fields 40-42) and a send time through the intake's
// bounds and checks, the view and the grouping: nothing panics; a cause
// that passes is within agent/report's bounds and printable; and a node
// lands in at most one incident, its own.
func FuzzIntakeCause(f *testing.F) {
	f.Add(marshal(hung(2, "/mnt/a", false)), int64(0))
	f.Add(marshal(hung(3, "/mnt/a", true)), int64(300_000))
	f.Add(marshal(&gwpb.StateUpdate{Meta: downMeta(1, 2, "x"), Cause: &gwpb.Cause{Wchan: "a\x00b", Class: "worst"}, AdminDrain: true}), int64(-5))
	f.Add(marshal(&gwpb.StateUpdate{Meta: downMeta(1, 2, "x"), Cause: &gwpb.Cause{Mountpoint: "/x"}}), int64(1))
	f.Fuzz(func(t *testing.T, updateBytes []byte, skewMs int64) {
		var raw gwpb.StateUpdate
		if proto.Unmarshal(updateBytes, &raw) != nil || raw.Meta == nil {
			return
		}
		u := intake.BoundUpdate(&raw)
		valid := intake.CheckCause(u.GetCause()) == nil
		if !valid {
			u.Cause = nil
		}
		if c := u.GetCause(); c != nil {
			for _, f := range []struct {
				v   string
				max int
			}{{c.GetFstype(), 32}, {c.GetSource(), 256}, {c.GetMountpoint(), 256}, {c.GetWchan(), 64}, {c.GetClass(), 16},
				{c.GetExampleComm(), 64}, {c.GetJob(), 128}} {
				if len(f.v) > f.max || !utf8.ValidString(f.v) {
					t.Fatalf("accepted a field out of bounds: %q", f.v)
				}
				for _, r := range f.v {
					if !unicode.IsPrint(r) {
						t.Fatalf("accepted an unprintable field: %q", f.v)
					}
				}
			}
		}
		nu := intake.DecodeUpdate(u)
		in := view.NodeInput{Name: "n1", Role: view.RoleAgent, Status: mesh.StatusAlive, StatusSince: t0, Update: nu, Direct: nu.Meta,
			ClockOffset: time.Duration(skewMs) * time.Millisecond}
		n, rule := view.ComputeNodeCause(&in, t0, defaultPolicy)
		down := []incident.Node{incidents.NodeOf(n, rule)}
		if n.State != view.StateDown {
			down = nil
		}
		s, _ := incident.Group(incident.State{}, down, t0, incident.Config{})
		if len(s.Open) > 1 {
			t.Fatalf("one node opened %d incidents", len(s.Open))
		}
		for name := range s.Member {
			if name != "n1" {
				t.Fatalf("node n1 put %q into an incident", name)
			}
		}
	})
}
