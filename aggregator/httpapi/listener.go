package httpapi

import (
	"net"
	"net/netip"
	"time"
)

// Admission of a connection, in Accept, before any byte of it is read.
// Past each bound a new connection is closed at once (counted by reason in
// gracewatch_aggregator_http_connections_closed_total, logged rate
// limited), rather than left waiting in the kernel's backlog, so that a
// client learns at once that the aggregator will not serve it:
//
//   - per_source: its source (conns.go, sourceOf) already holds
//     ServerOptions.MaxConnsPerSource connections, so one host takes at
//     most that many of the slots;
//   - cap: ServerOptions.MaxConns connections are open, so a flood costs
//     that many descriptors and goroutines;
//   - reserve: the last reserveOf(MaxConns) slots are kept for sources
//     that hold fewer than reserveShare connections (the scheduler,
//     Prometheus, an administrator: a handful each), so that the hosts
//     that fill the rest cannot take them.
//
// Connection reasons of gracewatch_aggregator_http_connections_closed_total.
const (
	closedPerSource = "per_source"
	closedCap       = "cap"
	closedReserve   = "reserve"
	// closedIdle: a connection idle pressureHeaderTimeout, under
	// pressure (conns.go).
	closedIdle = "idle_pressure"
	// closedHeader: a connection that had not sent its first request
	// pressureHeaderTimeout after its acceptance, under pressure.
	closedHeader = "header_pressure"
)

// closedReasons lists the reasons, so that each series exists from the
// start.
var closedReasons = []string{closedPerSource, closedCap, closedReserve, closedIdle, closedHeader}

// The shares of ServerOptions.MaxConns.
const (
	// DefaultMaxConnsPerSource bounds the connections open at once from
	// one source: a scheduler's controller, a Prometheus or an
	// administrator's host holds a few (a watch, a request or two at once);
	// 64 leaves room for a busy controller or a small proxy, and it takes
	// 14 hosts at the bound to fill the slots outside the reserve.
	DefaultMaxConnsPerSource = 64
	// reserveShare: a source that holds this many connections or more
	// cannot take a reserved slot.
	reserveShare = 8
)

// reserveOf is how many of max slots are reserved: 1/8 (128 of 1,024),
// enough for 16 sources at reserveShare.
func reserveOf(max int) int { return max / 8 }

// highWaterOf is the number of open connections from which the server is
// under pressure (conns.go): 3/4 of max (768 of 1,024).
func highWaterOf(max int) int { return max * 3 / 4 }

// limit wraps l so that its connections are admitted by the bounds above
// and tracked (conns.go) until they close.
func (s *Server) limit(l net.Listener) net.Listener {
	return &limitListener{Listener: l, connTracker: s.conns}
}

type limitListener struct {
	net.Listener
	*connTracker
}

// Accept returns the next connection within the bounds; those past them
// are closed at once.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		tc, reason := l.admit(c)
		if tc != nil {
			return tc, nil
		}
		c.Close()
		l.refuse(c, reason)
	}
}

// sourceOf returns what the per-source bound counts a remote address as:
// the IPv4 address, or the /64 of an IPv6 address (one host is commonly
// given a whole /64 and can take any address in it); an IPv4-mapped IPv6
// address is its IPv4 address. The zero Addr when the address is not an
// IP's (no per-source bound then).
func sourceOf(a net.Addr) netip.Addr {
	var ip netip.Addr
	switch a := a.(type) {
	case *net.TCPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	default:
		if a != nil {
			ap, err := netip.ParseAddrPort(a.String())
			if err == nil {
				ip = ap.Addr()
			}
		}
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.Addr()
	}
	return ip
}

// refuse counts and logs a connection closed at once for reason: once per
// source and reason and connLogEvery, ratelog.Burst lines in all.
func (l *limitListener) refuse(c net.Conn, reason string) {
	l.closed.WithLabelValues(reason).Inc()
	n := l.refused.Add(1)
	src := sourceOf(c.RemoteAddr())
	ok, suppressed := l.logLimit.Allow(reason+" "+src.String(), time.Now())
	if !ok {
		return
	}
	msg := "connection closed at once: too many open"
	switch reason {
	case closedPerSource:
		msg = "connection closed at once: too many open from its source"
	case closedReserve:
		msg = "connection closed at once: the slots left are reserved for sources that hold few connections"
	}
	l.log.Warn(msg, "remote", c.RemoteAddr().String(), "source", src.String(), "reason", reason,
		"max", l.max, "max_per_source", l.perSource, "refused_total", n, "suppressed", suppressed)
}
