package aggregator

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/actuate"
	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/httpapi"
	"github.com/gracewatch/gracewatch/aggregator/incident"
	"github.com/gracewatch/gracewatch/aggregator/incidents"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/config"
	"github.com/gracewatch/gracewatch/internal/hostlist"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// incFixture is a Service with a down and a batched up actuator, a log
// kept for counting, and nodes n1..nN up.
type incFixture struct {
	*harness
	logs           *testutil.SyncBuffer
	downLog, upLog string
}

func newIncFixture(t *testing.T, nodes int, cfg incident.Config, opts ...func(*Options)) *incFixture {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join(dir, "act.sh")
	if err := os.WriteFile(script, []byte(testutil.LogScript), 0o755); err != nil {
		t.Fatal(err)
	}
	f := &incFixture{logs: &testutil.SyncBuffer{}, downLog: filepath.Join(dir, "down.log"), upLog: filepath.Join(dir, "up.log")}
	retries := 0
	acts := []actuate.Config{
		{On: actuate.OnDown, Command: []string{script, f.downLog, "{node}", "{reason}"}, Timeout: config.Dur(10 * time.Second), Retries: &retries},
		{On: actuate.OnUp, Command: []string{script, f.upLog, "{nodes}"}, Timeout: config.Dur(10 * time.Second), Retries: &retries},
	}
	var w io.Writer = f.logs
	if testing.Verbose() {
		w = io.MultiWriter(f.logs, tWriter{t})
	}
	o := append([]func(*Options){func(o *Options) {
		o.Actuators, o.Incidents = acts, cfg
		o.Logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}}, opts...)
	f.harness = newHarness(t, o...)
	for i := 1; i <= nodes; i++ {
		f.member(fmt.Sprintf("n%d", i), upMeta(1, 1))
	}
	return f
}

// hung is node's StateUpdate: down for job 7, whose deadline passed a
// minute ago, hung on the FUSE mount mnt (no mount: only a wait channel),
// clean once its processes are gone.
func hung(seq uint64, mnt string, clean bool) *gwpb.StateUpdate {
	reason := "job 7 teardown exceeded grace 2m0s: 1 unkillable (pid 100 cat, D in request_wait_answer, fuse " + mnt + ")"
	phase := "overdue"
	if clean {
		phase = "released"
		reason += "; gone since 12:00:00Z, resume to clear"
	}
	c := &gwpb.Cause{Wchan: "request_wait_answer", Class: "unkillable", Unkillable: 1, ExamplePid: 100, ExampleComm: "cat", Job: "7"}
	if mnt != "" {
		c.Fstype, c.Source, c.Mountpoint = "fuse.hangfs", "gracewatch-hangfs", mnt
	}
	return &gwpb.StateUpdate{Meta: downMeta(1, seq, reason), Reason: reason, Cause: c, Clean: clean,
		Teardowns: []*gwpb.Teardown{{Job: "7", Phase: phase, DeadlineMs: ms(t0.Add(-time.Minute))}}}
}

// hangTwoMounts makes n1..n20 hang on /mnt/a and n21, n22 on /mnt/b.
func (f *incFixture) hangTwoMounts() {
	f.t.Helper()
	for i := 1; i <= 22; i++ {
		mnt := "/mnt/a"
		if i > 20 {
			mnt = "/mnt/b"
		}
		f.update(fmt.Sprintf("n%d", i), hung(2, mnt, false))
	}
	f.settle()
}

func (f *incFixture) settle() {
	f.t.Helper()
	f.sync()
	waitFor(f.t, "the actuators to finish", func() bool { return !f.svc.act.Busy() })
}

// incident returns the open incident of mountpoint mnt.
func (f *incFixture) incident(mnt string) incident.Incident {
	f.t.Helper()
	incs, _ := f.svc.Incidents()
	for _, inc := range incs {
		if inc.Open() && inc.Cause.Mountpoint == mnt {
			return inc
		}
	}
	f.t.Fatalf("no open incident of %s in %+v", mnt, incs)
	return incident.Incident{}
}

func count(s, sub string) int { return strings.Count(s, sub) }

// answerResumes makes the fake mesh answer every resume Control like an
// agent (an ack, then an up state) and returns what lists the nodes asked
// so far, in the order asked.
func (f *incFixture) answerResumes() (resumed func() []string) {
	// An incident's resumes are sent concurrently: the callback locks
	// what it records.
	var mu sync.Mutex
	var resumes []string
	seqs := map[string]uint64{}
	f.mesh.OnSend(func(node string, env *gwpb.Envelope) error {
		c := env.GetControl()
		if c.GetAction() != gwpb.Action_ACTION_RESUME {
			return nil
		}
		mu.Lock()
		resumes = append(resumes, node)
		seqs[node]++
		up := upMeta(1, 10+seqs[node])
		mu.Unlock()
		f.mesh.Deliver(node, &gwpb.Envelope{Body: &gwpb.Envelope_Ack{Ack: &gwpb.ControlAck{Id: c.GetId(), Ok: true, Meta: up}}})
		f.mesh.Deliver(node, &gwpb.Envelope{Body: &gwpb.Envelope_State{State: &gwpb.StateUpdate{Meta: up}}})
		return nil
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(resumes)
	}
}

// flushBatch waits for the batched on="up" actuator to gather n nodes,
// lets BatchDelay pass and waits for the run.
func (f *incFixture) flushBatch(n int) {
	f.t.Helper()
	f.sync()
	waitFor(f.t, "a batch to gather", func() bool { return f.svc.act.Gathering() == n })
	f.clk.Advance(actuate.BatchDelay)
	f.settle()
}

// Issue 16's first two proofs, at the Service: 20 nodes hung on one mount
// and 2 on another out of 30 are two incidents with the right nodes, one
// log line each; with the limit at 10 %, 3 drains run and the others are
// held and shown; a node that comes back frees a slot; confirm lets an
// incident's through; confirming what is unknown or closed is refused.
func TestIncidentsAndTheDrainLimit(t *testing.T) {
	f := newIncFixture(t, 30, incident.Config{LimitFraction: 0.1})
	url := f.serve(httpapi.ServerOptions{Token: []byte(testToken)})
	f.hangTwoMounts()

	a, b := f.incident("/mnt/a"), f.incident("/mnt/b")
	if hl, _ := hostlist.Compress(a.Nodes); hl != "n[1-20]" {
		t.Errorf("incident of /mnt/a: %s", hl)
	}
	if hl, _ := hostlist.Compress(b.Nodes); hl != "n[21-22]" {
		t.Errorf("incident of /mnt/b: %s", hl)
	}
	logs := f.logs.String()
	if n := count(logs, `msg="incident opened"`); n != 2 {
		t.Errorf("%d 'incident opened' lines, want 2 (one per incident):\n%s", n, logs)
	}
	if n := count(logs, `msg="incident `); n != 2 {
		t.Errorf("%d incident lines, want 2, not one per node", n)
	}

	downs := testutil.ReadLines(t, f.downLog)
	if len(downs) != 3 {
		t.Fatalf("%d drains, want 3 (10 %% of 30): %q", len(downs), downs)
	}
	for _, d := range downs {
		if !strings.Contains(d, fmt.Sprintf(" incident %d (fuse.hangfs /mnt/a, ", a.ID)) && !strings.Contains(d, fmt.Sprintf(" incident %d (fuse.hangfs /mnt/b, ", b.ID)) {
			t.Errorf("drain reason %q does not name its incident", d)
		}
	}
	_, lim := f.svc.Incidents()
	if lim.HeldCount != 19 || lim.Limit != 3 || lim.Used != 3 {
		t.Errorf("limit %+v, want 19 held, 3 of 3 used", lim)
	}
	if r := f.svc.Ready(); r.HeldDrains != 19 || !strings.Contains(r.Detail, "19 drains held by the blast-radius limit") {
		t.Errorf("readyz held %d, detail %q", r.HeldDrains, r.Detail)
	}
	var il api.IncidentList
	if r := call(t, "GET", url+"/v1/incidents", "", ""); r.status != 200 || json.Unmarshal(r.body, &il) != nil {
		t.Fatalf("GET /v1/incidents: %d %s", r.status, r.body)
	}
	held := 0
	for _, inc := range il.Incidents {
		held += inc.HeldCount
	}
	if len(il.Incidents) != 2 || held != 19 || il.Limit.Held != 19 || !il.Leader {
		t.Errorf("GET /v1/incidents = %s", call(t, "GET", url+"/v1/incidents", "", "").body)
	}

	// A drained node whose agent the mesh declares dead is not back: it
	// keeps its slot, however often it flaps.
	second := strings.Fields(downs[1])[0]
	f.status(second, mesh.StatusDead)
	f.status(second, mesh.StatusAlive)
	f.settle()
	if got := len(testutil.ReadLines(t, f.downLog)); got != 3 {
		t.Fatalf("%d drains after a drained node flapped through unreachable, want still 3", got)
	}

	// A drained node comes back: its slot frees, the oldest held drain runs.
	first := strings.Fields(downs[0])[0]
	f.update(first, &gwpb.StateUpdate{Meta: upMeta(1, 3)})
	f.flushBatch(1)
	if got := len(testutil.ReadLines(t, f.downLog)); got != 4 {
		t.Fatalf("%d drains after a drained node came back, want 4", got)
	}
	if ups := testutil.ReadLines(t, f.upLog); !slices.Equal(ups, []string{first}) {
		t.Fatalf("on=up runs %q, want one for %s", ups, first)
	}

	// Confirming incident a lets its held drains through, not b's.
	heldB := len(f.svc.act.LimitStatus().Held[b.ID])
	if r := call(t, "POST", url+fmt.Sprintf("/v1/incidents/%d/confirm", a.ID), "", `{"reason":"x"}`); r.status != 401 {
		t.Errorf("confirm without a token: %d", r.status)
	}
	r := call(t, "POST", url+fmt.Sprintf("/v1/incidents/%d/confirm", a.ID), testToken, `{"reason":"the FUSE server died: drain them"}`)
	if r.status != 200 {
		t.Fatalf("confirm: %d %s", r.status, r.body)
	}
	f.settle()
	drainedA := 0
	for _, d := range testutil.ReadLines(t, f.downLog) {
		if strings.Contains(d, "/mnt/a,") {
			drainedA++
		}
	}
	if drainedA != 20 || len(f.svc.act.LimitStatus().Held[b.ID]) != heldB {
		t.Errorf("after confirm: %d drains of /mnt/a (want its 20), %d of b held (want %d)", drainedA, len(f.svc.act.LimitStatus().Held[b.ID]), heldB)
	}

	if r := call(t, "POST", url+"/v1/incidents/999/confirm", testToken, `{"reason":"x"}`); r.status != 404 {
		t.Errorf("confirm of an unknown incident: %d %s", r.status, r.body)
	}
	if r := call(t, "POST", url+"/v1/incidents/x/confirm", testToken, `{"reason":"x"}`); r.status != 400 {
		t.Errorf("confirm of a bad id: %d %s", r.status, r.body)
	}
	f.update("n21", &gwpb.StateUpdate{Meta: upMeta(1, 3)})
	f.update("n22", &gwpb.StateUpdate{Meta: upMeta(1, 3)})
	if _, err := f.svc.ConfirmIncident(b.ID, "x", "test", 0); !errors.Is(err, ErrIncidentClosed) {
		t.Errorf("confirm of a closed incident: %v", err)
	}
	if r := call(t, "POST", url+fmt.Sprintf("/v1/incidents/%d/confirm", b.ID), testToken, `{"reason":"x"}`); r.status != 409 {
		t.Errorf("confirm of a closed incident over HTTP: %d %s", r.status, r.body)
	}
}

// Issue 16's third proof, at the Service: the FUSE server comes back (each
// agent reports its node clean): with auto_resume every node of the shared
// incident is resumed, its on="up" actuator runs in one batch for their
// hostlist, and the incident closes; without, they stay drained. A node of
// a single-node incident (its own fault) is never resumed so.
func TestIncidentsRecovery(t *testing.T) {
	for _, auto := range []bool{true, false} {
		t.Run(fmt.Sprintf("auto_resume=%v", auto), func(t *testing.T) {
			f := newIncFixture(t, 10, incident.Config{AutoResume: auto})
			resumed := f.answerResumes()
			for i := 1; i <= 4; i++ {
				f.update(fmt.Sprintf("n%d", i), hung(2, "/mnt/a", false))
			}
			f.update("n9", hung(2, "/mnt/own", false))
			f.settle()
			if got := len(testutil.ReadLines(t, f.downLog)); got != 5 {
				t.Fatalf("%d drains, want 5", got)
			}
			id := f.incident("/mnt/a").ID
			// The file system answers again: every agent finds its node clean.
			for i := 1; i <= 4; i++ {
				f.update(fmt.Sprintf("n%d", i), hung(3, "/mnt/a", true))
			}
			f.update("n9", hung(3, "/mnt/own", true))
			if !auto {
				f.settle()
				if r := resumed(); len(r) != 0 || len(testutil.ReadLines(t, f.upLog)) != 0 {
					t.Fatalf("auto_resume off: resumes %v, up runs %v", r, testutil.ReadLines(t, f.upLog))
				}
				f.wantState("n1", view.StateDown)
				if inc := f.incident("/mnt/a"); len(inc.Clean) != 4 {
					t.Errorf("clean %v", inc.Clean)
				}
				return
			}
			waitFor(t, "the nodes up", func() bool {
				f.sync()
				return f.node("n1").State == view.StateUp && f.node("n4").State == view.StateUp
			})
			f.flushBatch(4)
			if ups := testutil.ReadLines(t, f.upLog); !slices.Equal(ups, []string{"n[1-4]"}) {
				t.Errorf("on=up runs %q, want one batch n[1-4]", ups)
			}
			r := resumed()
			slices.Sort(r)
			if !slices.Equal(r, []string{"n1", "n2", "n3", "n4"}) {
				t.Errorf("resumed %v, want n[1-4] and not n9 (an incident of its own)", r)
			}
			f.wantState("n9", view.StateDown)
			inc, ok := func() (incident.Incident, bool) {
				incs, _ := f.svc.Incidents()
				for _, inc := range incs {
					if inc.ID == id {
						return inc, true
					}
				}
				return incident.Incident{}, false
			}()
			if !ok || inc.Open() || !regexp.MustCompile(`msg="incident closed" .*incident=`+fmt.Sprint(id)+` `).MatchString(f.logs.String()) {
				t.Errorf("incident %d: %+v, want closed and logged", id, inc)
			}
		})
	}
}

// Issue 16's fourth proof: a node whose clock is 5 minutes ahead is flagged
// (metric, /readyz, one log line) and its deadline DOWN, which arrives 5
// minutes before the deadline by this aggregator's clock, is served with
// the skew named and not drained until the deadline has passed here.
func TestIncidentsClockAhead(t *testing.T) {
	f := newIncFixture(t, 1, incident.Config{})
	d := f.clk.Now().Add(5 * time.Minute) // the deadline, which the node's clock already passed
	reason := "job 7 teardown exceeded grace 2m0s: 1 unkillable"
	u := &gwpb.StateUpdate{Meta: downMeta(1, 2, reason), Reason: reason,
		Teardowns: []*gwpb.Teardown{{Job: "7", Phase: "overdue", DeadlineMs: ms(d)}}}
	f.mesh.Deliver("n1", &gwpb.Envelope{SentMs: ms(f.clk.Now().Add(5 * time.Minute)), Body: &gwpb.Envelope_State{State: u}})
	f.settle()
	n := f.wantState("n1", view.StateDown)
	if !strings.Contains(n.Reason, "has not passed by the aggregator's clock; the node's clock is 5m0s ahead") || !n.EarlyUntil.Equal(d) {
		t.Errorf("reason %q, early until %v", n.Reason, n.EarlyUntil)
	}
	r := f.svc.Ready()
	if r.ClockSkewedNodes != 1 || len(r.ClockSkewed) != 1 || r.ClockSkewed[0].OffsetSeconds != 300 {
		t.Errorf("readyz clock %+v", r)
	}
	if n := count(f.logs.String(), "a node's clock disagrees"); n != 1 {
		t.Errorf("%d clock lines, want 1", n)
	}
	f.advance(5*time.Minute - time.Second)
	f.settle()
	if got := testutil.ReadLines(t, f.downLog); len(got) != 0 {
		t.Fatalf("drained before the deadline by the aggregator's clock: %q", got)
	}
	f.advance(time.Second)
	f.settle()
	if got := testutil.ReadLines(t, f.downLog); len(got) != 1 || got[0] != "n1 "+reason {
		t.Fatalf("at the deadline: drains %q, want one with the agent's reason", got)
	}
	// Its clock is set right: the flag clears (one line).
	f.mesh.Deliver("n1", &gwpb.Envelope{SentMs: ms(f.clk.Now()), Body: &gwpb.Envelope_State{State: &gwpb.StateUpdate{Meta: downMeta(1, 3, reason), Reason: reason}}})
	f.sync()
	if r := f.svc.Ready(); r.ClockSkewedNodes != 0 {
		t.Errorf("still flagged: %+v", r.ClockSkewed)
	}
}

// A cause out of bounds is refused at the intake (counted, logged once):
// the node is down without it and joins no file system's incident.
func TestIncidentsCauseRefused(t *testing.T) {
	f := newIncFixture(t, 1, incident.Config{})
	u := hung(2, "/mnt/"+strings.Repeat("x", 300), false)
	f.update("n1", u)
	f.update("n1", hung(3, "/mnt/"+strings.Repeat("x", 300), false))
	f.settle()
	if n := f.node("n1"); n.Latch.Cause != nil {
		t.Errorf("cause %+v kept", n.Latch.Cause)
	}
	incs, _ := f.svc.Incidents()
	if len(incs) != 1 || incs[0].Cause.Kind != incident.KindUndiagnosed {
		t.Errorf("incidents %+v, want n1 in an undiagnosed one", incs)
	}
	if n := count(f.logs.String(), "a node's cause refused"); n != 1 {
		t.Errorf("%d refusal lines, want 1", n)
	}
}

// The tracker's bound of a confirmation is the HTTP API's.
func TestMaxConfirmForIsTheAPIs(t *testing.T) {
	if incidents.MaxConfirmFor != api.MaxConfirmFor {
		t.Errorf("incidents.MaxConfirmFor %v, api.MaxConfirmFor %v", incidents.MaxConfirmFor, api.MaxConfirmFor)
	}
}
