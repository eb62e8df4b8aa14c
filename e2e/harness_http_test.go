package e2e

// The aggregator's HTTP API as the tests use it: its view of the nodes, a
// round of its loop, requests with the administrators' token, and the
// /v1/watch stream.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// node is the aggregator's view of one node (GET /v1/nodes/{name}).
type node struct {
	Name        string     `json:"name"`
	State       string     `json:"state"`
	Reason      string     `json:"reason"`
	Since       time.Time  `json:"since"`
	FreeAt      *time.Time `json:"free_at"`
	Schedulable bool       `json:"schedulable"`
}

func (g *aggregator) nodes(t testing.TB, query string) []node {
	t.Helper()
	ns, err := fetchNodes(g.url + "/v1/nodes" + query)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func fetchNodes(url string) ([]node, error) {
	var out struct {
		Nodes []node `json:"nodes"`
	}
	_, err := getJSON(url, "", &out)
	return out.Nodes, err
}

func (g *aggregator) node(t testing.TB, name string) (node, bool) {
	for _, n := range g.nodes(t, "") {
		if n.Name == name {
			return n, true
		}
	}
	return node{}, false
}

// waitNode polls the aggregator (bounded) until the node satisfies cond.
func (g *aggregator) waitNode(t testing.TB, name, what string, timeout time.Duration, cond func(node) bool) node {
	t.Helper()
	n, err, ok := testutil.PollRead(timeout, func() (node, error) {
		n, known := g.node(t, name)
		if !known {
			return n, errors.New("not known")
		}
		return n, nil
	}, cond)
	if !ok {
		t.Fatalf("%s: node %s not %s within %v (last: %+v, %v)", g.name, name, what, timeout, n, err)
	}
	return n
}

// loopRound returns once g's main loop has processed everything queued
// before the call (a message a member handed it, a timer's tick) and
// recomputed the view from it: the proof that what a test sent was taken
// or left, with no time allowed for it. A forget of a node g does not know
// changes nothing and is answered from the loop in the order of its queue,
// before that batch's recomputation; the second of two is queued after the
// first was answered, so it is answered once the batch that held the first
// (and everything queued before it) is done.
func (g *aggregator) loopRound(t testing.TB, token string) {
	t.Helper()
	for range 2 {
		if code, body := g.post(t, "/v1/nodes/"+unknownNode+"/forget", token, `{"reason":"a round of the loop"}`); code != http.StatusNotFound {
			t.Fatalf("%s: forget of %s, a node it does not know: %d %s, want 404", g.name, unknownNode, code, body)
		}
	}
}

// unknownNode is a node name no test's cluster has (loopRound).
const unknownNode = "no-such-node"

func (g *aggregator) post(t testing.TB, path, token, body string) (int, string) {
	t.Helper()
	code, b, err := call("POST", g.url+path, token, body)
	if err != nil {
		t.Fatal(err)
	}
	return code, string(b)
}

// call makes one HTTP request (a body, other than a GET's, as JSON; the bearer token
// unless empty) and returns the status and the body.
func call(method, url, token, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if method != "GET" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, b, fmt.Errorf("%s %s: %w", method, url, err)
	}
	return resp.StatusCode, b, nil
}

// getJSON GETs url (with the token unless empty) and decodes its 200 answer
// into v. It returns the body, and an error naming the URL unless the answer
// was a 200 that decodes.
func getJSON(url, token string, v any) ([]byte, error) {
	code, body, err := call("GET", url, token, "")
	if err != nil {
		return body, err
	}
	if code != 200 {
		return body, fmt.Errorf("GET %s: %d %s", url, code, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return body, fmt.Errorf("GET %s: %v\n%s", url, err, body)
	}
	return body, nil
}

// event is one Server-Sent Event of /v1/watch, stamped when it arrived.
type event struct {
	ID   string
	Type string
	Data string
	At   time.Time
}

// watcher follows /v1/watch in the background.
type watcher struct {
	cancel context.CancelFunc
	events chan event
	done   chan struct{}
}

func (g *aggregator) watch(t testing.TB) *watcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", g.url+"/v1/watch", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("watch: %v", err)
	}
	w := &watcher{cancel: cancel, events: make(chan event, 4096), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer resp.Body.Close()
		err := testutil.ReadSSE(resp.Body, func(e testutil.SSEEvent) {
			if e.Event == "" && e.Data == "" {
				return // a heartbeat: a comment alone
			}
			select {
			case w.events <- event{ID: e.ID, Type: e.Event, Data: e.Data, At: time.Now()}:
			default:
			}
		})
		if errors.Is(err, testutil.ErrSSEField) {
			t.Error(err)
		}
	}()
	t.Cleanup(func() { cancel(); <-w.done })
	return w
}

// next returns the next event about node whose state is state (other
// events are skipped), or fails after timeout.
func (w *watcher) next(t testing.TB, name, state string, timeout time.Duration) (node, event) {
	t.Helper()
	return w.nextWhere(t, fmt.Sprintf("no %s event for %s", state, name), timeout, func(n node) bool {
		return n.Name == name && n.State == state
	})
}

// nextWhere returns the next node event whose node match accepts (other
// events are skipped), or fails with "NONE within TIMEOUT" after timeout.
func (w *watcher) nextWhere(t testing.TB, none string, timeout time.Duration, match func(node) bool) (node, event) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev := <-w.events:
			if ev.Type != "node" {
				continue
			}
			var n node
			if err := json.Unmarshal([]byte(ev.Data), &n); err != nil {
				t.Fatalf("watch event %q: %v", ev.Data, err)
			}
			if match(n) {
				return n, ev
			}
		case <-deadline:
			t.Fatalf("%s within %v", none, timeout)
		}
	}
}
