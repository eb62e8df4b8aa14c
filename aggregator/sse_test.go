package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/httpapi"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/internal/testutil/apispec"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// watcher is a real SSE client of /v1/watch.
type watcher struct {
	t      *testing.T
	events chan testutil.SSEEvent
	header http.Header
}

func openWatch(t *testing.T, base, lastID string) *watcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/v1/watch", nil)
	if err != nil {
		t.Fatal(err)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		resp.Body.Close()
		t.Fatalf("watch: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	w := &watcher{t: t, events: make(chan testutil.SSEEvent, 1024), header: resp.Header}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(w.events)
		err := testutil.ReadSSE(resp.Body, func(ev testutil.SSEEvent) { w.events <- ev })
		if errors.Is(err, testutil.ErrSSEField) {
			t.Error(err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		<-done
	})
	// The spec's view of the stream: 200, text/event-stream.
	apispec.CheckResponse(t, req, resp.StatusCode, resp.Header, []byte("retry: 2000\n\n"))
	return w
}

// next returns the next event or comment.
func (w *watcher) next() testutil.SSEEvent {
	w.t.Helper()
	select {
	case ev, ok := <-w.events:
		if !ok {
			w.t.Fatal("watch stream ended")
		}
		switch ev.Event {
		case "snapshot":
			apispec.CheckSchema(w.t, "NodeList", []byte(ev.Data))
		case "node":
			apispec.CheckSchema(w.t, "Node", []byte(ev.Data))
		case "forget":
			apispec.CheckSchema(w.t, "Forgotten", []byte(ev.Data))
		}
		return ev
	case <-time.After(testTimeout):
		w.t.Fatal("no event in time")
	}
	return testutil.SSEEvent{}
}

// nextOf returns the id of the next event, which must be of kind event,
// and its data decoded into a T.
func nextOf[T any](w *watcher, event string) (string, T) {
	w.t.Helper()
	ev := w.next()
	if ev.Event != event {
		w.t.Fatalf("got %+v, want a %s event", ev, event)
	}
	var v T
	if err := json.Unmarshal([]byte(ev.Data), &v); err != nil {
		w.t.Fatal(err)
	}
	return ev.ID, v
}

func (w *watcher) nextNode() (string, api.Node) {
	w.t.Helper()
	return nextOf[api.Node](w, "node")
}

func (w *watcher) snapshot() (string, []api.Node) {
	w.t.Helper()
	id, list := nextOf[api.NodeList](w, "snapshot")
	return id, list.Nodes
}

func TestWatchSnapshotEventsAndResume(t *testing.T) {
	h := newHarness(t)
	h.member("n1", upMeta(1, 1))
	h.member("n2", upMeta(1, 1))
	base := h.serve(httpapi.ServerOptions{})
	e := h.svc.watchers.Epoch()

	w := openWatch(t, base, "")
	id, nodes := w.snapshot()
	if id != e+"-2" || len(nodes) != 2 || nodes[0].Name != "n1" {
		t.Fatalf("snapshot %s: %+v", id, nodes)
	}
	h.member("n1", teardownMeta(1, 2, at(time.Minute)))
	h.member("n2", downMeta(1, 2, "hung"))
	h.member("n1", upMeta(1, 3))
	want := []string{"n1 teardown", "n2 down", "n1 up"}
	for i, wnt := range want {
		id, n := w.nextNode()
		if id != fmt.Sprintf("%s-%d", e, i+3) || n.Name+" "+string(n.State) != wnt {
			t.Errorf("event %d: %s %s %s, want %s-%d %s", i, id, n.Name, n.State, e, i+3, wnt)
		}
	}

	// A client that saw event 3 reconnects: it gets 4 and 5, no snapshot.
	again := openWatch(t, base, e+"-3")
	for i, wnt := range want[1:] {
		id, n := again.nextNode()
		if id != fmt.Sprintf("%s-%d", e, i+4) || n.Name+" "+string(n.State) != wnt {
			t.Errorf("resumed event %d: %s %s %s", i, id, n.Name, n.State)
		}
	}
	// And then the live events: the next one each watcher gets is event 6,
	// which proves that nothing came after 5 before it.
	h.member("n2", upMeta(1, 3))
	if id, n := again.nextNode(); id != e+"-6" || n.Name != "n2" {
		t.Errorf("live after resume: %s %s", id, n.Name)
	}
	if id, n := w.nextNode(); id != e+"-6" || n.Name != "n2" {
		t.Errorf("live after event 5: %s %s", id, n.Name)
	}

	// A foreign id: a snapshot.
	foreign := openWatch(t, base, "deadbeef-3")
	if id, nodes := foreign.snapshot(); id != e+"-6" || len(nodes) != 2 {
		t.Errorf("foreign id: snapshot %s with %d nodes", id, len(nodes))
	}
}

func TestWatchBeyondHistory(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.History = 3 })
	base := h.serve(httpapi.ServerOptions{})
	e := h.svc.watchers.Epoch()
	for i := uint64(1); i <= 6; i++ {
		h.member("n1", upMeta(1, i))
	}
	w := openWatch(t, base, e+"-2") // 3..6 missed, only 4..6 kept
	if id, nodes := w.snapshot(); id != e+"-6" || len(nodes) != 1 || nodes[0].Seq != 6 {
		t.Errorf("snapshot %s %+v", id, nodes)
	}
	w2 := openWatch(t, base, e+"-3")
	for i := 4; i <= 6; i++ {
		if id, _ := w2.nextNode(); id != fmt.Sprintf("%s-%d", e, i) {
			t.Errorf("event id %s, want %s-%d", id, e, i)
		}
	}
}

func TestWatchHeartbeat(t *testing.T) {
	h := newHarness(t)
	base := h.serve(httpapi.ServerOptions{})
	w := openWatch(t, base, "")
	w.snapshot()
	// Wait for the stream's heartbeat timer (the only timer here).
	if !testutil.Poll(testTimeout, func() bool { return h.clk.Pending() == 1 }) {
		t.Fatalf("%d timers pending", h.clk.Pending())
	}
	h.clk.Advance(httpapi.DefaultHeartbeat)
	if ev := w.next(); ev.Comment != "heartbeat" {
		t.Errorf("got %+v, want a heartbeat comment", ev)
	}
}

// TestWatchStalledClient connects a client that never reads: the aggregator
// and the other watchers go on, and the stalled one is disconnected.
func TestWatchStalledClient(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.SubscriberBuffer = 4 })
	base := h.serve(httpapi.ServerOptions{WriteTimeout: 300 * time.Millisecond})

	stalled, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	if _, err := fmt.Fprintf(stalled, "GET /v1/watch HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	w := openWatch(t, base, "")
	w.snapshot()
	waitFor(t, "two watchers", func() bool { return h.svc.numSubscribers() == 2 })

	// Events enough to fill the socket buffers of the stalled client (8
	// MB: a reason is cut at maxUpdateReasonBytes).
	big := strings.Repeat("x", view.MaxUpdateReasonBytes-16)
	const n = 2000
	start := time.Now()
	for i := uint64(1); i <= n; i++ {
		h.update("n1", &gwpb.StateUpdate{Meta: downMeta(1, i, "hung"), Reason: fmt.Sprintf("%d %s", i, big)})
		_, node := w.nextNode()
		if !strings.HasPrefix(node.Reason, fmt.Sprintf("%d ", i)) {
			t.Fatalf("event %d: reason %.10q", i, node.Reason)
		}
	}
	t.Logf("%d events of %d KiB to the live watcher in %v", n, len(big)>>10, time.Since(start))
	// The stalled one may be dropped before the last event: as soon as its
	// buffer is full.
	waitFor(t, "the stalled watcher dropped", func() bool { return h.svc.numSubscribers() == 1 })
}

// waitFor is testutil.Eventually with this package's timeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, testTimeout, what, cond)
}

func TestWatchRejectsQuery(t *testing.T) {
	h := newHarness(t)
	base := h.serve(httpapi.ServerOptions{})
	if r := call(t, "GET", base+"/v1/watch?since=5", "", ""); r.status != 400 {
		t.Errorf("status %d", r.status)
	}
}

// The read timeout does not end a watch: its request is read, the stream
// lasts.
func TestWatchOutlivesTheReadTimeout(t *testing.T) {
	h := newHarness(t)
	const readTimeout = 300 * time.Millisecond
	base := h.serve(httpapi.ServerOptions{ReadTimeout: readTimeout})
	w := openWatch(t, base, "")
	w.snapshot()
	time.Sleep(3 * readTimeout) // not a wait: the watch stays idle past the read timeout, the scenario
	h.member("n1", upMeta(1, 1))
	if _, n := w.nextNode(); n.Name != "n1" {
		t.Errorf("event %+v", n)
	}
}
