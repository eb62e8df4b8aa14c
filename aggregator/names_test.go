package aggregator

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/actuate"
	"github.com/gracewatch/gracewatch/aggregator/httpapi"
	"github.com/gracewatch/gracewatch/internal/config"
	"github.com/gracewatch/gracewatch/internal/testutil"
	gwtestutil "github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// invalidNames are names a sender can claim that are not node names: a
// hostlist (scontrol would drain node1 and node2), every node, an option, an
// empty name, a space, a line break in a log.
var invalidNames = []string{"node[1-2]", "ALL", "all", "-x", "", "a b", "n1\nlevel=ERROR", "n1,n2", strings.Repeat("a", 254)}

// Invalid names arrive over a real mesh, as StateUpdates claiming them and
// as a member named by one; none enters the view, none reaches the argv of
// a real actuator (a script that logs its arguments), none is saved in the
// drained set, and the hostlist of the view still answers. A valid node
// sent the same way goes all the way, so the path is proven to work.
func TestInvalidNamesNeverReachTheActuators(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "act.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nlog=\"$1\"; shift\nfor a in \"$@\"; do printf '[%s]' \"$a\"; done >> \"$log\"; echo >> \"$log\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	downLog := filepath.Join(dir, "down.log")
	zero := 0
	var log syncLog
	svc, m := realAggregator(t, func(o *Options) {
		o.Logger = log.logger()
		o.StateDir = dir
		o.Actuators = []actuate.Config{{On: actuate.OnDown, Command: []string{script, downLog, "{node}", "gracewatch: {reason}"},
			Timeout: config.Dur(10 * time.Second), Retries: &zero}}
	})
	base := (&harness{t: t, svc: svc}).serve(httpapi.ServerOptions{})

	// A member named by a hostlist, publishing a down state.
	rogue := joinRaw(t, m.Addr(), "node[1-2]", downMeta(1, 1, "hung"))
	for _, name := range invalidNames {
		rogue.send(t, "agg-1", stateFrom(name, downMeta(1, 2, "hung"), "hung on "+name))
	}
	// The positive control, from the same member over the same path.
	rogue.send(t, "agg-1", stateFrom("n1", downMeta(1, 2, "hung"), "hung"))

	waitFor(t, "n1's actuator", func() bool { b, _ := os.ReadFile(downLog); return len(b) > 0 })
	// The mesh refuses them first (it validates every sender and member
	// name); what it let through, the intake refuses. Each refusal is
	// logged (every name once): wait until all are, and the member too,
	// so that what follows looks at the view after every one was handled.
	refusals := func() int {
		s := log.String()
		return strings.Count(s, "dropped undecodable message") + strings.Count(s, "what=message")
	}
	if !gwtestutil.Poll(testTimeout, func() bool { return refusals() >= len(invalidNames) }) {
		t.Fatalf("%d of %d invalid senders refused in the log:\n%s", refusals(), len(invalidNames), log.String())
	}
	waitFor(t, "the member node[1-2] refused", func() bool {
		s := log.String()
		return strings.Contains(s, "refused a member's alive message") && strings.Contains(s, "reason=invalid_name")
	})
	syncSvc(t, svc)
	if n := len(svc.Nodes()); n != 1 {
		t.Fatalf("%d nodes in the view: %v", n, svc.Nodes())
	}
	waitFor(t, "the actuators to finish", func() bool { return !svc.act.Busy() })

	if got := testutil.ReadLines(t, downLog); len(got) != 1 || got[0] != "[n1][gracewatch: hung]" {
		t.Errorf("actuator argv log %q, want only [n1][gracewatch: hung]", got)
	}
	if nodes := svc.Nodes(); len(nodes) != 1 || nodes[0].Name != "n1" {
		t.Errorf("view %v, want only n1", nodes)
	}
	if names, _, err := actuate.LoadDrained(dir); err != nil || strings.Join(names, ",") != "n1" {
		t.Errorf("drained set %q (%v), want n1", names, err)
	}
	resp, err := http.Get(base + "/v1/nodes?format=hostlist")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "n1\n" {
		t.Errorf("hostlist: %d %q, want 200 n1", resp.StatusCode, body)
	}
}

// The HTTP API refuses a path or a body that names something other than a
// node with 400 and says why, before it looks the name up.
func TestHTTPRefusesInvalidNames(t *testing.T) {
	h := newHarness(t)
	h.member("n1", upMeta(1, 1))
	base := h.serve(httpapi.ServerOptions{Token: []byte(testToken)})
	for _, tc := range []struct{ method, path, body, want string }{
		{"GET", "/v1/nodes/node%5B1-2%5D", "", `invalid node name "node[1-2]": '[' at byte 4`},
		{"GET", "/v1/nodes/ALL", "", "reserved"},
		{"POST", "/v1/nodes/-x/drain", `{"reason":"r"}`, "must start with a letter or a digit"},
		{"POST", "/v1/nodes/n1,n2/resume", `{"reason":"r"}`, "',' at byte 2"},
		{"POST", "/v1/nodes/all/forget", `{"reason":"r"}`, "reserved"},
		{"POST", "/v1/jobs", `{"job":"7","nodes":"n1,ALL","expiration":"0"}`, "nodes: invalid node name \"ALL\""},
	} {
		r := call(t, tc.method, base+tc.path, testToken, tc.body)
		if r.status != 400 || !strings.Contains(r.errorMsg(t), tc.want) {
			t.Errorf("%s %s: %d %s, want 400 saying %q", tc.method, tc.path, r.status, r.body, tc.want)
		}
	}
}

// An invalid name is logged once, however often it is sent.
func TestRefusedNameLoggedOnce(t *testing.T) {
	var log syncLog
	h := newHarness(t, func(o *Options) { o.Logger = log.logger() })
	for range 50 {
		h.update("node[1-2]", &gwpb.StateUpdate{Meta: downMeta(1, 2, "x")})
	}
	if n := strings.Count(log.String(), "invalid node name refused"); n != 1 {
		t.Errorf("%d log lines for one invalid name, want 1:\n%s", n, log.String())
	}
	if _, ok := h.svc.Node("node[1-2]"); ok {
		t.Error("node[1-2] is in the view")
	}
}
