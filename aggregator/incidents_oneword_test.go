package aggregator

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/httpapi"
	"github.com/gracewatch/gracewatch/aggregator/incident"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/config"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// Issue 26: one node's word never moves another node. The attacker is root
// on one compute node: it sends what its own agent could, for its own name
// only (node restriction), so at the Service it is one node's StateUpdates,
// delivered as the mesh delivers them after its checks.

// resumesLogged counts the aggregator's decisions to auto-resume: the line
// is written on the loop, before the Controls go out, so after a sync it is
// there or the decision was not taken.
func (f *incFixture) resumesLogged() int {
	return count(f.logs.String(), `msg="incident: resuming its nodes that are clean"`)
}

// incidentOf returns the open incident of node.
func (f *incFixture) incidentOf(node string) incident.Incident {
	f.t.Helper()
	incs, _ := f.svc.Incidents()
	for _, inc := range incs {
		if inc.Open() && slices.Contains(inc.Nodes, node) {
			return inc
		}
	}
	f.t.Fatalf("%s in no open incident: %+v", node, incs)
	return incident.Incident{}
}

// wantNoResume fails if the aggregator decided or sent any auto-resume.
func (f *incFixture) wantNoResume(resumed func() []string, when string) {
	f.t.Helper()
	f.sync()
	if n, r := f.resumesLogged(), resumed(); n != 0 || len(r) != 0 {
		f.t.Fatalf("%s: %d auto-resume decisions, resumes sent to %v; want none", when, n, r)
	}
}

// Item A, as the issue reproduced it: n1 is alone in an incident of a wait
// channel, clean and latched (the agents' auto_resume is "never"; the
// aggregator's [incidents] auto_resume is on). One node's DOWN with the same
// wait channel, whatever it says next (clean, up, down again), never makes
// the aggregator resume n1; three honest nodes of one cause, all clean,
// are resumed as before; and while the cause still hangs the others, one
// node that clears itself does not resume the rest.
func TestIncidentsOneNodeNeverResumesAnother(t *testing.T) {
	t.Run("one liar and the victim", func(t *testing.T) {
		f := newIncFixture(t, 3, incident.Config{AutoResume: true})
		resumed := f.answerResumes()
		f.update("n1", hung(2, "", false))
		f.update("n1", hung(3, "", true))
		f.wantNoResume(resumed, "n1 alone, clean")

		// The attacker: its own node DOWN with n1's wait channel.
		f.update("n2", hung(2, "", false))
		if inc := f.incidentOf("n1"); !slices.Equal(inc.Nodes, []string{"n1", "n2"}) || inc.Peak != 2 {
			t.Fatalf("incident %+v, want n1 and n2 in one", inc)
		}
		f.wantNoResume(resumed, "n2 joined n1's incident")
		// It says it is clean, comes back, goes down again, clean again.
		f.update("n2", hung(3, "", true))
		f.wantNoResume(resumed, "n2 clean too")
		f.update("n2", &gwpb.StateUpdate{Meta: upMeta(1, 4)})
		f.wantNoResume(resumed, "n2 back")
		f.update("n2", hung(5, "", false))
		f.update("n2", hung(6, "", true))
		f.wantNoResume(resumed, "n2 down and clean again")
		f.wantState("n1", view.StateDown)
	})

	t.Run("three honest nodes", func(t *testing.T) {
		f := newIncFixture(t, 3, incident.Config{AutoResume: true})
		resumed := f.answerResumes()
		for i := 1; i <= 3; i++ {
			f.update(fmt.Sprintf("n%d", i), hung(2, "", false))
		}
		for i := 1; i <= 3; i++ {
			f.update(fmt.Sprintf("n%d", i), hung(3, "", true))
		}
		waitFor(t, "n[1-3] up", func() bool {
			f.sync()
			return f.node("n1").State == view.StateUp && f.node("n2").State == view.StateUp && f.node("n3").State == view.StateUp
		})
		r := resumed()
		slices.Sort(r)
		if !slices.Equal(r, []string{"n1", "n2", "n3"}) {
			t.Errorf("resumed %v, want n[1-3] once each", r)
		}
	})

	t.Run("the cause still hangs the others", func(t *testing.T) {
		// n1..n3 honest on /mnt/a, n4 the attacker. n1's processes end
		// (it is clean) while n2 and n3 still hang: the file system has
		// not come back. n4 clearing itself (clean, then back) is one
		// node's word that the cause cleared: n1 stays down. n2 clean
		// as well: two nodes besides n1 cleared, one of them honest.
		f := newIncFixture(t, 4, incident.Config{AutoResume: true})
		resumed := f.answerResumes()
		for i := 1; i <= 4; i++ {
			f.update(fmt.Sprintf("n%d", i), hung(2, "/mnt/a", false))
		}
		f.update("n1", hung(3, "/mnt/a", true))
		f.update("n4", hung(3, "/mnt/a", true))
		f.wantNoResume(resumed, "n1 and the attacker clean, n2 and n3 hung")
		f.update("n4", &gwpb.StateUpdate{Meta: upMeta(1, 4)})
		f.wantNoResume(resumed, "the attacker back, n2 and n3 hung")
		f.update("n2", hung(3, "/mnt/a", true))
		waitFor(t, "n1 and n2 up", func() bool {
			f.sync()
			return f.node("n1").State == view.StateUp && f.node("n2").State == view.StateUp
		})
		f.wantState("n3", view.StateDown)
	})
}

// Item B, as the issue reproduced it: with the limit at 5, eight nodes hang
// on one file system (the last, n8, the attacker's); five are drained,
// three held, and an administrator confirms the incident, which lets the
// three through. Every node but the attacker's comes back; the attacker's
// stays down with the same cause, so the incident stays open. Eight later
// hangs on that file system join it: the confirmation covered what the
// administrator saw, not them, so they take the limit's free slots like any
// other drain (5: the first five's slots freed when they came back, the
// confirmed three took none) and the rest are held.
func TestIncidentsConfirmationCoversWhatWasSeen(t *testing.T) {
	f := newIncFixture(t, 16, incident.Config{LimitNodes: 5})
	url := f.serve(httpapi.ServerOptions{Token: []byte(testToken)})
	for i := 1; i <= 8; i++ {
		f.update(fmt.Sprintf("n%d", i), hung(2, "/mnt/a", false))
	}
	f.settle()
	id := f.incident("/mnt/a").ID
	if d, lim := len(testutil.ReadLines(t, f.downLog)), f.svc.act.LimitStatus(); d != 5 || lim.HeldCount != 3 {
		t.Fatalf("%d drains and %d held, want 5 and 3", d, lim.HeldCount)
	}
	r := call(t, "POST", url+fmt.Sprintf("/v1/incidents/%d/confirm", id), testToken, `{"reason":"the FUSE server died: drain them"}`)
	var ic api.IncidentConfirmation
	if r.status != 200 || json.Unmarshal(r.body, &ic) != nil || ic.Released != 3 || ic.Nodes != "n[1-8]" || ic.Count != 8 || ic.Until != nil {
		t.Fatalf("confirm: %d %s; want 3 released, n[1-8] covered, no until", r.status, r.body)
	}
	f.settle()
	if d := len(testutil.ReadLines(t, f.downLog)); d != 8 {
		t.Fatalf("%d drains after the confirmation, want 8", d)
	}

	for i := 1; i <= 7; i++ {
		f.update(fmt.Sprintf("n%d", i), &gwpb.StateUpdate{Meta: upMeta(1, 3)})
	}
	f.flushBatch(7)
	if inc := f.incident("/mnt/a"); inc.ID != id || !slices.Equal(inc.Nodes, []string{"n8"}) {
		t.Fatalf("incident %+v, want %d open with the attacker's n8 alone", inc, id)
	}
	lim := f.svc.act.LimitStatus()
	free := lim.Limit - lim.Used
	if free != 5 {
		t.Fatalf("limit %+v: %d free slots, want 5 (n[1-5] came back, n[6-8] took none)", lim, free)
	}

	for i := 9; i <= 16; i++ {
		f.update(fmt.Sprintf("n%d", i), hung(2, "/mnt/a", false))
	}
	f.settle()
	if inc := f.incident("/mnt/a"); inc.ID != id || len(inc.Nodes) != 9 {
		t.Fatalf("incident %+v, want the later hangs in %d", inc, id)
	}
	var later []string
	for _, d := range testutil.ReadLines(t, f.downLog)[8:] {
		later = append(later, strings.Fields(d)[0])
	}
	lim = f.svc.act.LimitStatus()
	if len(later) != free || lim.HeldCount != 8-free || len(lim.Held[id]) != 8-free {
		t.Errorf("later hangs: %d drained %v, %d held %v; want %d drained (the free slots), %d held",
			len(later), later, lim.HeldCount, lim.Held[id], free, 8-free)
	}
	// GET /v1/incidents says what the confirmation covers: the attacker's
	// node, the one of the nodes then that has not come back.
	var il api.IncidentList
	if r := call(t, "GET", url+"/v1/incidents", "", ""); r.status != 200 || json.Unmarshal(r.body, &il) != nil || len(il.Incidents) != 1 {
		t.Fatalf("GET /v1/incidents: %d %s", r.status, r.body)
	}
	if inc := il.Incidents[0]; !inc.Confirmed || inc.Confirmation == nil || inc.Confirmation.Nodes != "n8" || inc.Confirmation.Count != 1 ||
		inc.Confirmation.Until != nil || inc.HeldCount != 8-free {
		t.Errorf("GET /v1/incidents: %s", call(t, "GET", url+"/v1/incidents", "", "").body)
	}
}

// A confirmation "for" a time covers every drain of the incident until
// then, the nodes that join it included, and none after; its bounds are
// checked.
func TestIncidentsConfirmFor(t *testing.T) {
	f := newIncFixture(t, 6, incident.Config{LimitNodes: 1, LimitWindow: config.Dur(time.Hour)})
	url := f.serve(httpapi.ServerOptions{Token: []byte(testToken)})
	f.update("n1", hung(2, "/mnt/a", false))
	f.update("n2", hung(2, "/mnt/a", false))
	f.settle()
	id := f.incident("/mnt/a").ID
	path := url + fmt.Sprintf("/v1/incidents/%d/confirm", id)
	for _, body := range []string{`{"reason":"x","for":-1}`, `{"reason":"x","for":86401}`, `{"reason":"x","for":"10m"}`, `{"reason":"x","until":1}`} {
		if r := call(t, "POST", path, testToken, body); r.status != 400 {
			t.Errorf("confirm %s: %d %s, want 400", body, r.status, r.body)
		}
	}
	if _, err := f.svc.ConfirmIncident(id, "x", "test", MaxConfirmFor+time.Second); !errors.Is(err, ErrConfirmFor) {
		t.Errorf("ConfirmIncident past MaxConfirmFor: %v", err)
	}
	if got := testutil.ReadLines(t, f.downLog); len(got) != 1 {
		t.Fatalf("drains %q, want n1's only (a refused confirmation confirms nothing)", got)
	}
	r := call(t, "POST", path, testToken, `{"reason":"the FUSE server died","for":600}`)
	var ic api.IncidentConfirmation
	if r.status != 200 || json.Unmarshal(r.body, &ic) != nil || ic.Released != 1 || ic.Until == nil || !ic.Until.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("confirm for 10m: %d %s", r.status, r.body)
	}
	f.advance(10*time.Minute - time.Millisecond)
	f.update("n3", hung(2, "/mnt/a", false))
	f.settle()
	f.advance(time.Millisecond)
	f.update("n4", hung(2, "/mnt/a", false))
	f.settle()
	var drained []string
	for _, d := range testutil.ReadLines(t, f.downLog) {
		drained = append(drained, strings.Fields(d)[0])
	}
	slices.Sort(drained)
	if held := f.svc.act.LimitStatus().Held[id]; !slices.Equal(drained, []string{"n1", "n2", "n3"}) || !slices.Equal(held, []string{"n4"}) {
		t.Errorf("drained %v, held %v; want n[1-3] drained, n4 (joined at the until) held", drained, held)
	}
}
