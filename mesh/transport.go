package mesh

// The stream guard: memberlist reads every inbound stream (a direct
// message, a push-pull) whole into memory before anything of gracewatch's
// sees it, up to 20 MB each, with no bound on how many at once: 40 direct
// messages of 4 MiB each from one member held 575 MB. The guard bounds the
// inbound streams of one peer address open at once; past the bound a new
// one is closed at once (its sender's send fails; an agent's state sender
// retries). A peer's messages go one after the other on few connections:
// an agent opens at most 4 at once to an aggregator (agent/sender.go), a
// push-pull one more.

import (
	"fmt"
	"log"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// maxStreamsPerPeer bounds the inbound streams of one peer address open at
// once.
const maxStreamsPerPeer = 8

// streamGuard wraps memberlist's transport (see the top of this file). It
// is safe for concurrent use.
type streamGuard struct {
	memberlist.NodeAwareTransport
	streams  chan net.Conn
	done     chan struct{}
	stop     sync.Once
	wg       sync.WaitGroup
	max      int
	onRefuse func(peer string)

	mu   sync.Mutex
	open map[string]int // peer IP -> streams open
}

// newNetTransport makes memberlist's NetTransport as memberlist.Create
// would (binding a dynamic port with retries, and recording it in mc).
func newNetTransport(mc *memberlist.Config, logger *log.Logger) (*memberlist.NetTransport, error) {
	nc := &memberlist.NetTransportConfig{BindAddrs: []string{mc.BindAddr}, BindPort: mc.BindPort, Logger: logger}
	limit := 1
	if mc.BindPort == 0 {
		limit = 10 // binding one port for both TCP and UDP is racy
	}
	var err error
	for range limit {
		var nt *memberlist.NetTransport
		if nt, err = memberlist.NewNetTransport(nc); err == nil {
			if mc.BindPort == 0 {
				mc.BindPort = nt.GetAutoBindPort()
				if mc.AdvertisePort == 0 {
					mc.AdvertisePort = mc.BindPort
				}
			}
			return nt, nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, fmt.Errorf("could not set up network transport: %w", err)
}

// guardStreams wraps t; onRefuse is called (on the guard's goroutine) for
// each stream closed for the bound.
func guardStreams(t memberlist.Transport, max int, onRefuse func(peer string)) *streamGuard {
	nat, ok := t.(memberlist.NodeAwareTransport)
	if !ok {
		nat = nodeAware{t}
	}
	g := &streamGuard{NodeAwareTransport: nat, streams: make(chan net.Conn), done: make(chan struct{}), max: max,
		onRefuse: onRefuse, open: map[string]int{}}
	g.wg.Add(1)
	go g.forward()
	return g
}

// StreamCh implements memberlist.Transport.
func (g *streamGuard) StreamCh() <-chan net.Conn { return g.streams }

// Shutdown implements memberlist.Transport. It is idempotent.
func (g *streamGuard) Shutdown() error {
	var err error
	g.stop.Do(func() {
		err = g.NodeAwareTransport.Shutdown()
		close(g.done)
		g.wg.Wait()
	})
	return err
}

func (g *streamGuard) forward() {
	defer g.wg.Done()
	in := g.NodeAwareTransport.StreamCh()
	for {
		var c net.Conn
		select {
		case <-g.done:
			return
		case c = <-in:
		}
		peer := peerIP(c.RemoteAddr())
		g.mu.Lock()
		full := g.open[peer] >= g.max
		if !full {
			g.open[peer]++
		}
		g.mu.Unlock()
		if full {
			c.Close()
			if g.onRefuse != nil {
				g.onRefuse(peer)
			}
			continue
		}
		select {
		case g.streams <- &guardedConn{Conn: c, release: func() { g.release(peer) }}:
		case <-g.done:
			c.Close()
			return
		}
	}
}

func (g *streamGuard) release(peer string) {
	g.mu.Lock()
	if g.open[peer]--; g.open[peer] <= 0 {
		delete(g.open, peer)
	}
	g.mu.Unlock()
}

// guardedConn releases its peer's slot once, when closed.
type guardedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *guardedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

func peerIP(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// nodeAware gives a plain Transport the NodeAwareTransport methods, as
// memberlist's own shim does.
type nodeAware struct{ memberlist.Transport }

func (t nodeAware) WriteToAddress(b []byte, addr memberlist.Address) (time.Time, error) {
	return t.WriteTo(b, addr.Addr)
}

func (t nodeAware) DialAddressTimeout(addr memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.DialTimeout(addr.Addr, timeout)
}
