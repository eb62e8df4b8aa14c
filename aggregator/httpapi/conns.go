package httpapi

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/ratelog"
)

// Pressure. From highWaterOf(MaxConns) open connections on, the server
// gives back the slots that serve nobody sooner: a connection that is
// idle, or has not sent its first request, has pressureHeaderTimeout from
// the start of that (its acceptance, or the end of its last answer) to
// send one, instead of the idle timeout's 2 min or the header timeout's
// 10 s; once given, that deadline stands until the connection sends a
// request. When the mark is crossed, the connections already idle or
// silent are given it too. And the unread body of an answered request (a
// refused POST whose body never comes) is waited for pressureHeaderTimeout,
// not the read timeout (Server.ServeHTTP). Below the mark the normal
// timeouts apply again. The ConnState hook of net/http tells the states;
// an HTTP/2 connection is idle between its streams, and from its start.

// pressureHeaderTimeout is what a connection gets under pressure to send
// a request: on a site's network a request arrives within milliseconds,
// a TLS handshake within tens, and a client that keeps a connection for
// its next request sends it soon or opens a new one.
const pressureHeaderTimeout = 2 * time.Second

// connLogEvery spaces the log lines of closed connections per source and
// reason (and of the pressure's start); ratelog.Burst bounds them in all.
const connLogEvery = 10 * time.Second

// connTracker admits and tracks the connections of one Server. Its methods
// are safe for concurrent use; none blocks but on its own mutex.
type connTracker struct {
	log      *slog.Logger
	clock    clock.Clock
	logLimit *ratelog.Limiter
	closed   *prometheus.CounterVec

	max, perSource, reserve, highWater int

	// open is len(conns), readable without the lock; refused counts the
	// connections closed at Accept.
	open, refused atomic.Int64

	mu       sync.Mutex
	conns    map[*trackedConn]struct{}
	bySource map[netip.Addr]int
	// peak is the most connections open at once, admitted how many were
	// admitted in all (tests).
	peak, admitted int
}

func newConnTracker(o ServerOptions, log *slog.Logger, closed *prometheus.CounterVec) *connTracker {
	return &connTracker{log: log, clock: o.Clock, logLimit: ratelog.New(connLogEvery), closed: closed,
		max: o.MaxConns, perSource: o.MaxConnsPerSource, reserve: reserveOf(o.MaxConns), highWater: highWaterOf(o.MaxConns),
		conns: map[*trackedConn]struct{}{}, bySource: map[netip.Addr]int{}}
}

// trackedConn is an admitted connection; it gives its slot back once,
// when closed.
type trackedConn struct {
	net.Conn
	t    *connTracker
	src  netip.Addr
	once sync.Once

	// Under t.mu: the state net/http last reported (StateNew until then),
	// since when, its changes so far (gen), and the timer of the short
	// deadline of this state, if given one.
	state http.ConnState
	since time.Time
	gen   int
	timer clock.Timer
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.t.release(c) })
	return err
}

// admit returns c tracked, or nil and the reason it is refused.
func (t *connTracker) admit(c net.Conn) (*trackedConn, string) {
	tc, reason, given := t.admitLocked(c)
	if given > 0 {
		if ok, suppressed := t.logLimit.Allow("pressure", time.Now()); ok {
			t.log.Warn("connections past the high-water mark: those idle or not done sending a request are closed after a short time",
				"high_water", t.highWater, "max", t.max, "short_deadlines", given, "timeout", pressureHeaderTimeout, "suppressed", suppressed)
		}
	}
	return tc, reason
}

// admitLocked is admit under t.mu; given is how many connections got the
// short deadline when c crossed the high-water mark, 0 if it did not.
func (t *connTracker) admitLocked(c net.Conn) (tc *trackedConn, reason string, given int) {
	src := sourceOf(c.RemoteAddr())
	t.mu.Lock()
	defer t.mu.Unlock()
	held, open := t.bySource[src], len(t.conns)
	if !src.IsValid() {
		held = 0
	}
	switch {
	case held >= t.perSource:
		return nil, closedPerSource, 0
	case open >= t.max:
		return nil, closedCap, 0
	case open >= t.max-t.reserve && held >= reserveShare:
		return nil, closedReserve, 0
	}
	tc = &trackedConn{Conn: c, t: t, src: src, state: http.StateNew, since: t.clock.Now()}
	t.conns[tc] = struct{}{}
	t.bySource[src]++
	open++
	t.open.Store(int64(open))
	t.peak = max(t.peak, open)
	t.admitted++
	if open < t.highWater {
		return tc, "", 0
	}
	t.shortDeadline(tc)
	if open > t.highWater {
		return tc, "", 0
	}
	// The mark is crossed: those idle or silent get the short deadline.
	given = 1
	for o := range t.conns {
		if o.timer == nil && (o.state == http.StateNew || o.state == http.StateIdle) {
			t.shortDeadline(o)
			given++
		}
	}
	return tc, "", given
}

// shortDeadline gives c, new or idle, pressureHeaderTimeout from the start
// of its state to leave it; then it is closed. t.mu is held.
func (t *connTracker) shortDeadline(c *trackedConn) {
	if c.timer != nil || (c.state != http.StateNew && c.state != http.StateIdle) {
		return
	}
	gen, reason := c.gen, closedHeader
	if c.state == http.StateIdle {
		reason = closedIdle
	}
	d := max(0, c.since.Add(pressureHeaderTimeout).Sub(t.clock.Now()))
	c.timer = t.clock.AfterFunc(d, func() {
		t.mu.Lock()
		_, open := t.conns[c]
		late := open && c.gen == gen
		t.mu.Unlock()
		if late {
			t.forceClose(c, reason)
		}
	})
}

// forceClose counts c closed for reason, unless it was closed already,
// and closes it: the count comes first, so that whoever sees the close
// sees it counted. It closes the socket under any TLS, so that no close
// alert is waited for.
func (t *connTracker) forceClose(c *trackedConn, reason string) {
	c.once.Do(func() {
		t.closed.WithLabelValues(reason).Inc()
		t.release(c)
	})
	c.Conn.Close()
}

func (t *connTracker) release(c *trackedConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	delete(t.conns, c)
	if t.bySource[c.src]--; t.bySource[c.src] <= 0 {
		delete(t.bySource, c.src)
	}
	t.open.Store(int64(len(t.conns)))
}

// underPressure reports whether the open connections are at the
// high-water mark or past it.
func (t *connTracker) underPressure() bool { return t.open.Load() >= int64(t.highWater) }

// connState is the http.Server's ConnState hook: it records c's state
// and, under pressure, gives an idle connection the short deadline.
func (t *connTracker) connState(c net.Conn, st http.ConnState) {
	tc := tracked(c)
	if tc == nil || st == http.StateNew { // admit recorded it
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, open := t.conns[tc]; !open {
		return
	}
	tc.state, tc.since = st, t.clock.Now()
	tc.gen++
	if tc.timer != nil {
		tc.timer.Stop()
		tc.timer = nil
	}
	if st == http.StateIdle && len(t.conns) >= t.highWater {
		t.shortDeadline(tc)
	}
}

// tracked returns the trackedConn under c (a TLS connection's too), or nil.
func tracked(c net.Conn) *trackedConn {
	for c != nil {
		if tc, ok := c.(*trackedConn); ok {
			return tc
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		c = u.NetConn()
	}
	return nil
}

// shortenDiscard, under pressure, gives the unread rest of r's body
// pressureHeaderTimeout to arrive once the handler is done: net/http reads
// it (up to 256 KiB) to reuse the connection, until the read timeout
// otherwise. Call it when the handler has returned.
func (t *connTracker) shortenDiscard(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength == 0 || !t.underPressure() {
		return
	}
	err := http.NewResponseController(w).SetReadDeadline(time.Now().Add(pressureHeaderTimeout))
	if err != nil && !errors.Is(err, http.ErrNotSupported) {
		t.log.Debug("cannot shorten the read deadline", "err", err)
	}
}

// newConnsClosedCounter returns gracewatch_aggregator_http_connections_closed_total,
// registered with reg when not nil (the one already there if another
// server registered it).
func newConnsClosedCounter(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	cv := prometheus.NewCounterVec(prometheus.CounterOpts(opts("http_connections_closed_total",
		"HTTP connections the aggregator closed itself, by reason: closed at once when accepted past a bound (per_source: http.max_conns_per_source from its address or IPv6 /64; cap: every slot taken; reserve: the slots left are kept for sources that hold few), or under pressure (idle_pressure: idle 2 s; header_pressure: its first request not sent within 2 s of its acceptance).")),
		[]string{"reason"})
	for _, r := range closedReasons {
		cv.WithLabelValues(r)
	}
	return registerCounterVec(reg, cv)
}
