package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/watch"
	"github.com/gracewatch/gracewatch/internal/clock"
)

// handleWatch streams the view's changes as Server-Sent Events:
//
//   - first either a "snapshot" event (data: a api.NodeList of every node), or,
//     when the Last-Event-ID header names an event the history still holds,
//     the "node" events missed since it;
//   - then one "node" event (data: the Node, without report detail) per
//     change of a node, or a "forget" event (data: {"name": ...}) when a
//     node leaves the view, with "id: <epoch>-<seq>";
//   - a comment line every heartbeat interval, so that proxies and clients
//     can tell a quiet stream from a dead one.
//
// A watcher that cannot keep up (its buffer of events overflows, or a write
// blocks longer than the write timeout) is disconnected; it reconnects with
// Last-Event-ID and gets the events it missed or a new snapshot. Past
// ServerOptions.MaxWatchers streams at once a watch is answered 503 with
// Retry-After.
func (s *Server) handleWatch(w http.ResponseWriter, r *http.Request) {
	if len(r.URL.Query()) > 0 {
		s.writeError(w, http.StatusBadRequest, "the watch takes no query parameters (resume with the Last-Event-ID header)")
		return
	}
	if n := s.watchers.Add(1); n > int64(s.opts.MaxWatchers) {
		s.watchers.Add(-1)
		w.Header().Set("Retry-After", strconv.Itoa(watchRetryAfter))
		s.writeError(w, http.StatusServiceUnavailable, "too many watchers: this aggregator serves at most %d watch streams at once (http.max_watchers); retry later",
			s.opts.MaxWatchers)
		return
	}
	defer s.watchers.Add(-1)
	rc := http.NewResponseController(w)
	sub := s.svc.Subscribe(r.Header.Get("Last-Event-ID"))
	defer sub.Close()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)

	var buf bytes.Buffer
	send := func() bool {
		_ = rc.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
		_, err := w.Write(buf.Bytes())
		buf.Reset()
		if err == nil {
			err = rc.Flush()
		}
		if err != nil {
			s.log.Debug("watcher gone", "remote", r.RemoteAddr, "err", err)
			return false
		}
		return true
	}

	buf.WriteString("retry: " + strconv.FormatInt(sseRetry.Milliseconds(), 10) + "\n\n")
	if sub.Snapshot != nil {
		writeEvent(&buf, sub.SnapshotID, "snapshot", api.NodeList{Nodes: wireNodes(sub.Snapshot)})
	}
	for _, ev := range sub.Missed {
		writeChange(&buf, ev)
	}
	if !send() {
		return
	}

	beat := make(chan struct{}, 1)
	var hb clock.Timer
	arm := func() {
		hb = s.clock.AfterFunc(s.opts.Heartbeat, func() {
			select {
			case beat <- struct{}{}:
			default:
			}
		})
	}
	arm()
	defer func() { hb.Stop() }()

	for {
		select {
		case ev, ok := <-sub.C:
			if !ok {
				if sub.Dropped() {
					s.log.Info("watcher dropped: too slow", "remote", r.RemoteAddr)
					buf.WriteString(": dropped: too slow; reconnect with Last-Event-ID\n\n")
					send()
				}
				return
			}
			writeChange(&buf, ev)
			// Send what else is queued in one write.
			for more := true; more && buf.Len() < 64<<10; {
				select {
				case ev, ok := <-sub.C:
					if !ok {
						more = false
						break
					}
					writeChange(&buf, ev)
				default:
					more = false
				}
			}
			if !send() {
				return
			}
		case <-beat:
			buf.WriteString(": heartbeat\n\n")
			if !send() {
				return
			}
			arm()
		case <-r.Context().Done():
			return
		case <-s.stopping.Done():
			return
		}
	}
}

// writeChange writes one event of the history: "node" or "forget".
func writeChange(buf *bytes.Buffer, ev watch.Event) {
	if ev.Forgotten {
		writeEvent(buf, ev.ID, "forget", api.Forgotten{Name: ev.Node.Name})
		return
	}
	writeEvent(buf, ev.ID, "node", WireNode(ev.Node))
}

// writeEvent appends one SSE event to buf. JSON has no raw line breaks, so
// the data is one line.
func writeEvent(buf *bytes.Buffer, id, event string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		data, _ = json.Marshal(api.ErrorBody{Error: "cannot encode event: " + err.Error()})
	}
	buf.WriteString("id: " + id + "\nevent: " + event + "\ndata: ")
	buf.Write(data)
	buf.WriteString("\n\n")
}
