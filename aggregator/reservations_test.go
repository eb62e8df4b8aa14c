package aggregator

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/httpapi"
	"github.com/gracewatch/gracewatch/aggregator/meshfake"
	"github.com/gracewatch/gracewatch/aggregator/reservation"
	"github.com/gracewatch/gracewatch/internal/hostlist"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// withReservations turns the reservations on, against sched.
func withReservations(sched reservation.Scheduler) func(*Options) {
	return func(o *Options) {
		o.Reservations = reservation.DefaultConfig()
		o.Reservations.Command = []string{"unused"}
		o.ReservationScheduler = sched
	}
}

// heldNodes lists what sched holds of gracewatch's as "nodes until +end".
func heldNodes(sched *reservation.FakeScheduler) []string {
	var out []string
	for _, r := range sched.Reservations() {
		if strings.HasPrefix(r.Name, reservation.DefaultPrefix) {
			hl, _ := hostlist.Compress(r.Nodes)
			out = append(out, fmt.Sprintf("%s until +%v", hl, r.End.Sub(t0)))
		}
	}
	slices.Sort(out)
	return out
}

// waitHeld waits until sched holds want, stepping the fake clock by 100 ms
// between looks (the planner's rounds run on that clock), by 100 s at
// most: well before the 2 minutes the tests' teardowns hold their nodes.
// Each step follows a look (up to 50 ms apart), so the deadline allows for
// a thousand of them on a slow machine.
func waitHeld(h *harness, sched *reservation.FakeScheduler, want ...string) {
	h.t.Helper()
	start := h.clk.Now()
	var got []string
	if !testutil.Poll(10*testTimeout, func() bool {
		if got = heldNodes(sched); slices.Equal(got, want) {
			return true
		}
		if h.clk.Now().Sub(start) < 100*time.Second {
			h.advance(100 * time.Millisecond)
		}
		return false
	}) {
		h.t.Fatalf("the scheduler holds %q after %v on the fake clock, want %q", got, h.clk.Now().Sub(start), want)
	}
}

// TestReservationsFollowTheView: a node tearing down for 10 s is held until
// its free_at; it is given back when it is up again, and when it is down;
// GET /v1/reservations shows them.
func TestReservationsFollowTheView(t *testing.T) {
	sched := reservation.NewFakeScheduler()
	h := newHarness(t, withReservations(sched))
	url := h.serve(httpapi.ServerOptions{})
	maint := reservation.Reservation{Name: "maint_n2", Nodes: []string{"n2"}, End: at(time.Hour)}
	sched.Put(maint)

	h.member("n1", teardownMeta(1, 1, at(2*time.Minute)))
	h.member("n2", teardownMeta(1, 1, at(2*time.Minute)))
	h.member("n3", upMeta(1, 1))
	h.advance(5 * time.Second)
	if got := heldNodes(sched); len(got) != 0 {
		t.Fatalf("held after 5 s of teardown: %v", got)
	}
	waitHeld(h, sched, "n[1-2] until +2m0s")

	r := call(t, "GET", url+"/v1/reservations", "", "")
	var list api.ReservationList
	if err := json.Unmarshal(r.body, &list); err != nil {
		t.Fatal(err)
	}
	if !list.Enabled || !list.Leader || len(list.Reservations) != 1 || list.Reservations[0].Nodes != "n[1-2]" ||
		list.Reservations[0].Count != 2 || !list.Reservations[0].End.Equal(at(2*time.Minute)) {
		t.Errorf("GET /v1/reservations = %s", r.body)
	}

	h.member("n1", upMeta(1, 2))
	waitHeld(h, sched, "n2 until +2m0s")
	h.member("n2", downMeta(1, 2, "job 7 hung"))
	waitHeld(h, sched)

	got := sched.Reservations()
	if len(got) != 1 || got[0].Name != maint.Name || !slices.Equal(got[0].Nodes, maint.Nodes) || !got[0].End.Equal(maint.End) {
		t.Errorf("the administrator's reservation changed: %+v", got)
	}
}

// TestReservationsOff: without a command, nothing is planned and the
// endpoint says so.
func TestReservationsOff(t *testing.T) {
	h := newHarness(t)
	url := h.serve(httpapi.ServerOptions{})
	r := call(t, "GET", url+"/v1/reservations", "", "")
	if string(r.body) != `{"enabled":false,"leader":false,"reservations":[]}`+"\n" {
		t.Errorf("GET /v1/reservations = %s", r.body)
	}
}

// TestReservationsOneJobOfAThousandNodes: 1,000 nodes whose teardowns
// start within a second, with one free_at, then end over three seconds:
// the scheduler gets a handful of commands, not a thousand.
func TestReservationsOneJobOfAThousandNodes(t *testing.T) {
	sched := reservation.NewFakeScheduler()
	h := newHarness(t, withReservations(sched))
	free := at(2 * time.Minute)
	var names []string
	for i := range 1000 {
		name := fmt.Sprintf("node%04d", i)
		names = append(names, name)
		m := teardownMeta(1, 1, free)
		m.SinceMs = ms(at(time.Duration(i) * time.Millisecond))
		h.mesh.SetMember(meshfake.AgentMember(name, m, h.clk.Now()))
	}
	h.sync()
	h.advance(11 * time.Second)
	waitHeld(h, sched, "node[0000-0999] until +2m0s")
	for i := 0; i < len(names); i += 50 {
		for _, n := range names[i : i+50] {
			h.mesh.SetMember(meshfake.AgentMember(n, upMeta(1, 2), h.clk.Now()))
		}
		h.advance(150 * time.Millisecond)
	}
	waitHeld(h, sched)
	calls := map[string]int{}
	total := 0
	for _, v := range []string{"list", "create", "update", "delete"} {
		calls[v] = sched.Calls(v)
		total += calls[v]
	}
	t.Logf("commands for 1,000 nodes: %d %v", total, calls)
	// A list, a create, an update per round (rounds at most a second
	// apart) while the teardowns end over three seconds, a delete.
	if calls["create"] != 1 || calls["delete"] != 1 || calls["update"] > 4 || total > 8 {
		t.Errorf("%d commands %v, want at most 8", total, calls)
	}
}

// TestReservationsFailover: the leader dies during a teardown; the next
// leader adopts its reservation, and leaves exactly what the view calls
// for.
func TestReservationsFailover(t *testing.T) {
	sched := reservation.NewFakeScheduler()
	a := newHarness(t, withReservations(sched), func(o *Options) { o.Name = "agg-a" })
	b := newHarness(t, withReservations(sched), func(o *Options) { o.Name = "agg-b" })
	aggA := mesh.Member{Name: "agg-a", Role: gwpb.Role_ROLE_AGGREGATOR, Status: mesh.StatusAlive, Meta: &gwpb.Meta{Role: gwpb.Role_ROLE_AGGREGATOR}}
	aggB := mesh.Member{Name: "agg-b", Role: gwpb.Role_ROLE_AGGREGATOR, Status: mesh.StatusAlive, Meta: &gwpb.Meta{Role: gwpb.Role_ROLE_AGGREGATOR}}
	a.mesh.SetMember(aggB)
	b.mesh.SetMember(aggA)
	for _, h := range []*harness{a, b} {
		h.member("n1", teardownMeta(1, 1, at(2*time.Minute)))
		h.member("n2", teardownMeta(1, 1, at(2*time.Minute)))
		h.advance(10 * time.Second)
	}
	waitHeld(a, sched, "n[1-2] until +2m0s")
	// agg-b's planner learns that it does not lead at its next round (it
	// led alone until it saw agg-a).
	var st reservation.Status
	if !testutil.Poll(testTimeout, func() bool { st, _ = b.svc.Reservations(); return !st.Leader }) {
		t.Fatal("agg-b keeps reservations while agg-a leads")
	}
	if len(st.Reservations) != 0 {
		t.Fatalf("agg-b, not leading, holds %v", st.Reservations)
	}
	creates := sched.Calls("create")

	// agg-a is gone (killed: it deletes nothing); n2 ends its teardown.
	aggA.Status, aggA.Since = mesh.StatusDead, b.clk.Now()
	b.mesh.SetMember(aggA)
	b.member("n2", upMeta(1, 2))
	waitHeld(b, sched, "n1 until +2m0s")
	if sched.Calls("create") != creates {
		t.Errorf("agg-b created %d reservations, want it to adopt agg-a's", sched.Calls("create")-creates)
	}
	b.member("n1", upMeta(1, 2))
	waitHeld(b, sched)
}
