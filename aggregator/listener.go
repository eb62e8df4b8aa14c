package aggregator

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// limit wraps l so that at most ServerOptions.MaxConns accepted connections
// are open at once: past it a new one is closed at once (logged, rate
// limited), rather than left waiting in the kernel's backlog, so that a
// client learns at once that the aggregator is saturated and 5,000 slow
// clients cost 1,024 descriptors, each freed within the read timeout.
func (s *Server) limit(l net.Listener) net.Listener {
	return &limitListener{Listener: l, s: s, max: int64(s.opts.MaxConns)}
}

type limitListener struct {
	net.Listener
	s       *Server
	max     int64
	open    atomic.Int64
	refused atomic.Int64
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			c.Close()
			n := l.refused.Add(1)
			if ok, suppressed := l.s.connLog.Allow("cap", time.Now()); ok {
				l.s.log.Warn("connection closed at once: too many open", "remote", c.RemoteAddr().String(), "max", l.max,
					"refused_total", n, "suppressed", suppressed)
			}
			continue
		}
		return &limitConn{Conn: c, l: l}, nil
	}
}

// limitConn gives its slot back once, when closed.
type limitConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
