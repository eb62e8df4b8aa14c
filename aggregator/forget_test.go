package aggregator

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/httpapi"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// Forget removes a gone node from the view and the watch, refuses a live
// or unknown one, and reaches the other aggregators.
func TestServiceForget(t *testing.T) {
	h1 := newHarness(t)
	h2 := newHarnessClock(t, h1.clk, func(o *Options) { o.Name = "agg-2" })
	h1.mesh.OnSend(func(node string, env *gwpb.Envelope) error {
		if node == "agg-2" {
			h2.mesh.Deliver("agg-1", env)
		}
		return nil
	})
	for _, h := range []*harness{h1, h2} {
		other := map[*harness]string{h1: "agg-2", h2: "agg-1"}[h]
		h.mesh.SetMember(mesh.Member{Name: other, Role: gwpb.Role_ROLE_AGGREGATOR, Status: mesh.StatusAlive,
			Meta: &gwpb.Meta{Role: gwpb.Role_ROLE_AGGREGATOR}, Since: h1.clk.Now()})
		h.member("cn1", upMeta(1, 1))
		h.member("cn2", upMeta(1, 1))
		h.status("cn1", mesh.StatusDead)
	}
	h1.clk.Advance(time.Minute)
	h1.sync()
	h2.sync()
	sub := h1.svc.Subscribe("")
	defer sub.Close()

	ctx := context.Background()
	if err := h1.svc.Forget(ctx, "cn2", "test"); !errors.Is(err, ErrNotGone) || !strings.Contains(err.Error(), "alive") {
		t.Fatalf("Forget of a live node: %v, want ErrNotGone naming its status", err)
	}
	if err := h1.svc.Forget(ctx, "cn9", "test"); !errors.Is(err, ErrUnknownNode) {
		t.Fatalf("Forget of an unknown node: %v, want ErrUnknownNode", err)
	}
	if err := h1.svc.Forget(ctx, "cn1", "decommissioned"); err != nil {
		t.Fatalf("Forget of a dead node: %v", err)
	}
	if _, ok := h1.svc.Node("cn1"); ok {
		t.Fatal("cn1 still served after Forget")
	}
	if ns := h1.svc.Nodes(); len(ns) != 1 || ns[0].Name != "cn2" {
		t.Fatalf("nodes after Forget: %+v, want cn2 only", ns)
	}
	select {
	case ev := <-sub.C:
		if !ev.Forgotten || ev.Node.Name != "cn1" {
			t.Fatalf("watch event %+v, want cn1 forgotten", ev)
		}
	case <-time.After(testTimeout):
		t.Fatal("no forget event on the watch")
	}
	// A watcher resuming from before the forget gets it among the missed.
	if re := h1.svc.Subscribe(sub.SnapshotID); len(re.Missed) != 1 || !re.Missed[0].Forgotten {
		t.Fatalf("missed events %+v, want the forget", re.Missed)
	} else {
		re.Close()
	}
	// The other aggregator forgets it too.
	if !testutil.Poll(testTimeout, func() bool { h2.sync(); _, ok := h2.svc.Node("cn1"); return !ok }) {
		t.Fatal("agg-2 still serves cn1")
	}
	// The agent comes back: a new node.
	h1.member("cn1", upMeta(2, 1))
	if n, ok := h1.svc.Node("cn1"); !ok || n.State != view.StateUp {
		t.Fatalf("cn1 back: %+v, %v; want up", n, ok)
	}
}

// POST /v1/nodes/{name}/forget: token, reason, 409 for a live node, and
// answers that match proto/openapi.yaml.
func TestHTTPForget(t *testing.T) {
	h := newHarness(t)
	base := h.serve(httpapi.ServerOptions{Token: []byte(testToken)})
	h.member("n1", upMeta(1, 1))
	h.member("n2", upMeta(1, 1))
	h.status("n1", mesh.StatusLeft)
	h.clk.Advance(time.Minute)
	h.sync()

	if r := call(t, "POST", base+"/v1/nodes/n1/forget", "", `{"reason": "gone"}`); r.status != 401 {
		t.Fatalf("without token: %d", r.status)
	}
	if r := call(t, "POST", base+"/v1/nodes/n1/forget", testToken, `{}`); r.status != 400 || !strings.Contains(r.errorMsg(t), "reason") {
		t.Fatalf("without reason: %d %s", r.status, r.body)
	}
	if r := call(t, "POST", base+"/v1/nodes/n2/forget", testToken, `{"reason": "gone"}`); r.status != 409 {
		t.Fatalf("live node: %d %s", r.status, r.body)
	}
	if r := call(t, "POST", base+"/v1/nodes/n7/forget", testToken, `{"reason": "gone"}`); r.status != 404 {
		t.Fatalf("unknown node: %d %s", r.status, r.body)
	}
	w := openWatch(t, base, "")
	if _, nodes := w.snapshot(); len(nodes) != 2 {
		t.Fatalf("snapshot of %d nodes, want 2", len(nodes))
	}
	if r := call(t, "POST", base+"/v1/nodes/n1/forget", testToken, `{"reason": "decommissioned"}`); r.status != 200 || !strings.Contains(string(r.body), `"n1"`) {
		t.Fatalf("forget: %d %s", r.status, r.body)
	}
	if ev := w.next(); ev.Event != "forget" || ev.Data != `{"name":"n1"}` {
		t.Fatalf("watch event %q %s, want forget of n1", ev.Event, ev.Data)
	}
	if r := call(t, "GET", base+"/v1/nodes/n1", testToken, ""); r.status != 404 {
		t.Fatalf("forgotten node still served: %d %s", r.status, r.body)
	}
}
