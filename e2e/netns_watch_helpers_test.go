package e2e

// What the netns tests read of the mesh: the membership lines of the
// processes' logs, the aggregator's view of a node with its member status,
// and every node state /v1/watch streamed (recorder).

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// countLogs counts the log lines of every process that contain sub.
func (c *netnsCluster) countLogs(sub string) int {
	n := 0
	for _, p := range append([]*proc{c.agg.proc}, agentProcs(c.agents)...) {
		n += strings.Count(p.logs.String(), sub)
	}
	return n
}

func agentProcs(as []*agent) []*proc {
	out := make([]*proc, len(as))
	for i, a := range as {
		out[i] = a.proc
	}
	return out
}

// declaredDead returns the members p's mesh declared dead ("member gone"
// in its log) after since, and when it declared the last of them.
func declaredDead(p *proc, since time.Time) (map[string]bool, time.Time) {
	gone := map[string]bool{}
	var last time.Time
	for _, line := range strings.Split(p.logs.String(), "\n") {
		if !strings.Contains(line, `"msg":"member gone"`) {
			continue
		}
		// An agent's lines carry its own "node" first, then the member's;
		// the last one wins.
		var rec struct {
			Time time.Time `json:"time"`
			Node string    `json:"node"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil || !rec.Time.After(since) {
			continue
		}
		gone[rec.Node] = true
		if rec.Time.After(last) {
			last = rec.Time
		}
	}
	return gone, last
}

// rejoined returns the members p's log says came back alive (from dead
// or left), or joined, after since.
func rejoined(p *proc, since time.Time) map[string]bool {
	back := map[string]bool{}
	for _, line := range strings.Split(p.logs.String(), "\n") {
		if !strings.Contains(line, `"msg":"member back"`) && !strings.Contains(line, `"msg":"member joined"`) {
			continue
		}
		var rec struct {
			Time time.Time `json:"time"`
			Node string    `json:"node"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Time.After(since) {
			back[rec.Node] = true
		}
	}
	return back
}

// meshNode is a node of the view with the mesh's opinion of its agent.
type meshNode struct {
	node
	Member string `json:"member"`
}

// get returns the aggregator's view of one node, member status included.
func (c *netnsCluster) get(name string) (meshNode, error) {
	var n meshNode
	resp, err := http.Get(c.agg.url + "/v1/nodes/" + name)
	if err != nil {
		return n, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return n, fmt.Errorf("GET /v1/nodes/%s: %d %s", name, resp.StatusCode, body)
	}
	return n, json.Unmarshal(body, &n)
}

// waitMember polls (bounded) until the node's view satisfies cond.
func (c *netnsCluster) waitMember(name, what string, timeout time.Duration, cond func(meshNode) bool) meshNode {
	c.t.Helper()
	n, err, ok := testutil.PollRead(timeout, func() (meshNode, error) { return c.get(name) }, cond)
	if !ok {
		c.t.Fatalf("node %s not %s within %v (last: %+v, err %v)", name, what, timeout, n, err)
	}
	return n
}

// seen is one node state of the watch stream, stamped when it arrived.
type seen struct {
	At   time.Time
	ID   string
	Node meshNode
}

// recorder keeps every node state /v1/watch streams (the snapshot's and
// each change's) for the whole test.
type recorder struct {
	mu     sync.Mutex
	seen   []seen
	ended  bool
	badMsg string
	done   chan struct{}
}

func (c *netnsCluster) record() *recorder {
	c.t.Helper()
	w := c.agg.watch(c.t)
	r := &recorder{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		handle := func(ev event) {
			var ns []meshNode
			switch ev.Type {
			case "snapshot":
				var list struct {
					Nodes []meshNode `json:"nodes"`
				}
				if err := json.Unmarshal([]byte(ev.Data), &list); err != nil {
					r.fail(fmt.Sprintf("snapshot %q: %v", ev.Data, err))
				}
				ns = list.Nodes
			case "node":
				var n meshNode
				if err := json.Unmarshal([]byte(ev.Data), &n); err != nil {
					r.fail(fmt.Sprintf("event %q: %v", ev.Data, err))
				}
				ns = []meshNode{n}
			}
			r.mu.Lock()
			for _, n := range ns {
				r.seen = append(r.seen, seen{At: ev.At, ID: ev.ID, Node: n})
			}
			r.mu.Unlock()
		}
		for {
			select {
			case ev := <-w.events:
				handle(ev)
			case <-w.done:
				for {
					select {
					case ev := <-w.events:
						handle(ev)
					default:
						r.mu.Lock()
						r.ended = true
						r.mu.Unlock()
						return
					}
				}
			}
		}
	}()
	// Registered after watch's cleanup, so it runs first; it only waits
	// for the reader, which ends once watch's cleanup closes the stream.
	c.t.Cleanup(func() { w.cancel(); <-r.done })
	r.wait(c.t, "the snapshot", 10*time.Second, func(s seen) bool { return true })
	return r
}

func (r *recorder) fail(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.badMsg == "" {
		r.badMsg = msg
	}
}

// all returns what was recorded so far and fails the test if the stream
// ended or carried something undecodable.
func (r *recorder) all(t *testing.T) []seen {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.badMsg != "" {
		t.Fatal(r.badMsg)
	}
	if r.ended {
		t.Fatal("the /v1/watch stream ended during the test")
	}
	return append([]seen(nil), r.seen...)
}

// wait returns the first recorded state that satisfies cond, waiting
// (bounded) for it.
func (r *recorder) wait(t *testing.T, what string, timeout time.Duration, cond func(seen) bool) seen {
	t.Helper()
	var found seen
	if !testutil.Poll(timeout, func() bool {
		for _, s := range r.all(t) {
			if cond(s) {
				found = s
				return true
			}
		}
		return false
	}) {
		t.Fatalf("watch: no %s within %v", what, timeout)
	}
	return found
}

// bad returns the recorded states that are down or unreachable and not
// allowed by ok.
func (r *recorder) bad(t *testing.T, ok func(seen) bool) []seen {
	t.Helper()
	var out []seen
	for _, s := range r.all(t) {
		if (s.Node.State == "down" || s.Node.State == "unreachable") && !ok(s) {
			out = append(out, s)
		}
	}
	return out
}

// lasted says how long the node stayed in the state of s: until the next
// recorded state of that node that differs, or "still" if none.
func (r *recorder) lasted(t *testing.T, s seen) string {
	t.Helper()
	for _, x := range r.all(t) {
		if x.Node.Name == s.Node.Name && x.At.After(s.At) && x.Node.State != s.Node.State {
			return fmt.Sprintf("%v, then %s", x.At.Sub(s.At).Round(time.Millisecond), x.Node.State)
		}
	}
	return "the rest of the test"
}
