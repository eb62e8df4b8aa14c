package aggregator

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/httpapi"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// TestTeardownAttributionServed: a node's teardowns are served with the
// job's user, the command and when they were released (GET /v1/nodes), and
// a user or command that breaks the proto's rule is not served at all.
func TestTeardownAttributionServed(t *testing.T) {
	deadline := at(2 * time.Minute)
	u := &gwpb.StateUpdate{Meta: teardownMeta(1, 3, deadline), Teardowns: []*gwpb.Teardown{
		{Job: "7", Phase: "teardown", EndedMs: ms(t0), DeadlineMs: ms(deadline), GraceMs: 120000, User: "alice", Command: "cat"},
		{Job: "6", Phase: "released", EndedMs: ms(t0), DeadlineMs: ms(deadline), GraceMs: 120000, Outcome: "clean",
			ReleasedMs: ms(at(30 * time.Second)), User: "svc$", Command: "epilog.sh"},
		{Job: "5", Phase: "released", EndedMs: ms(t0), DeadlineMs: ms(deadline), GraceMs: 120000, Outcome: "clean",
			ReleasedMs: ms(at(time.Second)), User: "root;reboot", Command: "a\x1b[2Jb"},
	}}
	in := alive("n1", u.Meta)
	in.Update = updateIn(u)
	in.Direct = in.Update.Meta
	nodes := view.Compute([]view.NodeInput{in}, at(time.Minute), defaultPolicy)
	if len(nodes) != 1 || len(nodes[0].Teardowns) != 3 {
		t.Fatalf("nodes = %+v", nodes)
	}
	w := httpapi.WireNode(nodes[0])
	want := [][3]string{{"alice", "cat", ""}, {"svc$", "epilog.sh", "2025-06-01T12:00:30Z"}, {"", "", "2025-06-01T12:00:01Z"}}
	for i, td := range w.Teardowns {
		rel := ""
		if td.Released != nil {
			rel = td.Released.UTC().Format(time.RFC3339)
		}
		if got := [3]string{td.User, td.Command, rel}; got != want[i] {
			t.Errorf("teardown %s: user, command, released = %q; want %q", td.Job, got, want[i])
		}
	}
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "reboot") || strings.Contains(string(b), `\u001b`) {
		t.Errorf("a malformed user or command was served: %s", b)
	}
}
