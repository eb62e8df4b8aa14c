package mesh

// The stream guard: memberlist reads every inbound stream (a direct
// message, a push-pull) whole into memory before anything of gracewatch's
// sees it, up to 20 MB each, with no bound on how many at once: 40 direct
// messages of 4 MiB each from one member held 575 MB, and the same from 30
// source addresses (8 streams each) 2,275 MB. The guard bounds, in total
// and not per source address:
//
//   - the inbound streams of one peer address open at once
//     (maxStreamsPerPeer), and of all peers (maxStreamsTotal); past either
//     a new one is closed at once (its sender's send fails; an agent's
//     state sender retries);
//   - the bytes read by the streams open at once past the first
//     streamFreeBytes of each (maxStreamBytes): a read that would pass it
//     fails, and memberlist drops that stream. A state update, an ack, a
//     control are a few KB and never touch it, so a peer that sends
//     maximal messages from many addresses holds at most maxStreamBytes
//     of them (and memberlist's copies of those) in memory, and the
//     small messages of every other node still pass. What a stream
//     counts is what it makes memberlist hold: its bytes read, and what
//     its head says memberlist will expand or allocate (streamcheck.go).
//     A push-pull of a full member table (16,384 members, signed metas)
//     counts about 11 MB (TestStreamCheckHeaderLies): one fits beside the
//     small messages; a second at the same moment is dropped, and its
//     sender's next push-pull (minutes apart at that size) goes through.
//
// A peer's messages go one after the other on few connections: an agent
// opens at most 4 at once to an aggregator (agent/meshlink/sender.go), a push-pull
// one more.

import (
	"errors"
	"fmt"
	"log"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Bounds of the inbound streams (see the top of this file).
const (
	// maxStreamsPerPeer bounds the inbound streams of one peer address
	// open at once.
	maxStreamsPerPeer = 8
	// maxStreamsTotal bounds the inbound streams of all peers open at
	// once: 64 source addresses at their bound. Each holds at most
	// streamFreeBytes outside maxStreamBytes.
	maxStreamsTotal = 512
	// streamFreeBytes is what a stream reads before its bytes count
	// against maxStreamBytes: more than any state update without a
	// diagnostics report.
	streamFreeBytes = 64 << 10
	// maxStreamBytes bounds the bytes read past streamFreeBytes by the
	// streams open at once: 4 maximal direct messages (EnvelopeLimit),
	// each of which memberlist and the decoding copy about four times
	// before it is handled; or 8 push-pulls of a full member table.
	maxStreamBytes = 16 << 20
)

// errStreamBytes fails the read of a stream past maxStreamBytes.
var errStreamBytes = errors.New("inbound stream refused: the streams open at once hold their byte bound")

// streamGuard wraps memberlist's transport (see the top of this file). It
// is safe for concurrent use.
type streamGuard struct {
	memberlist.NodeAwareTransport
	streams  chan net.Conn
	packets  chan *memberlist.Packet
	done     chan struct{}
	stop     sync.Once
	wg       sync.WaitGroup
	max      int // per peer
	maxTotal int
	maxBytes int64
	onRefuse func(peer, why string) // why: refusedStreams, refusedStreamsTotal, refusedStreamBytes
	local    net.IP                 // the bound IP streams are dialled from (dialFrom)
	label    string                 // the mesh's label (memberlist Config.Label)
	keyring  *memberlist.Keyring    // the mesh's keys; nil: an insecure mesh

	mu    sync.Mutex
	open  map[string]int // peer IP -> streams open
	total int            // streams open
	bytes int64          // bytes read past streamFreeBytes, and reserved, by the streams open
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

// guardStreams wraps t, dialling from local (see dialFrom), with at most
// max streams per peer and the package's total bounds; onRefuse is called
// for each stream closed or failed for a bound (on the guard's goroutine,
// or on the reader's for the byte bound). label and keyring are the
// mesh's (keyring nil: insecure), with which the guard reads a stream's
// head (streamcheck.go).
func guardStreams(t memberlist.Transport, local net.IP, max int, label string, keyring *memberlist.Keyring, onRefuse func(peer, why string)) *streamGuard {
	nat, ok := t.(memberlist.NodeAwareTransport)
	if !ok {
		nat = nodeAware{t}
	}
	g := &streamGuard{NodeAwareTransport: nat, local: local, streams: make(chan net.Conn), packets: make(chan *memberlist.Packet),
		done: make(chan struct{}), max: max,
		maxTotal: maxStreamsTotal, maxBytes: maxStreamBytes, onRefuse: onRefuse, open: map[string]int{},
		label: label, keyring: keyring}
	g.wg.Add(2)
	go g.forward()
	go g.forwardPackets()
	return g
}

// DialTimeout implements memberlist.Transport: from the bound address (see
// dialFrom).
func (g *streamGuard) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return g.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout implements memberlist.NodeAwareTransport: from the
// bound address (see dialFrom), else as the wrapped transport dials.
// The stream's answer (a push-pull's, a ping's ack) is read as an inbound
// stream is (streamcheck.go), counted against the same byte bound but not
// against the inbound streams' slots.
func (g *streamGuard) DialAddressTimeout(addr memberlist.Address, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	var err error
	if local := dialFrom(g.local, addr.Addr); local != nil {
		c, err = (&net.Dialer{Timeout: timeout, LocalAddr: local}).Dial("tcp", addr.Addr)
	} else {
		c, err = g.NodeAwareTransport.DialAddressTimeout(addr, timeout)
	}
	if err != nil {
		return nil, err
	}
	return &guardedConn{Conn: c, g: g, peer: peerIP(c.RemoteAddr()), dialled: true}, nil
}

// dialFrom returns the local address a stream to addr is dialled from: the
// member's bound IP when it bound a specific one of addr's family, so that
// its streams come from the address it advertises (a node's own IP, on a
// node with several interfaces too: the receiver's per-peer bound counts
// source addresses); nil (the kernel chooses) otherwise.
func dialFrom(bound net.IP, addr string) *net.TCPAddr {
	if bound == nil || bound.IsUnspecified() {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	to := net.ParseIP(host)
	if to == nil || (to.To4() == nil) != (bound.To4() == nil) {
		return nil
	}
	return &net.TCPAddr{IP: bound}
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
		why := ""
		g.mu.Lock()
		switch {
		case g.open[peer] >= g.max:
			why = refusedStreams
		case g.total >= g.maxTotal:
			why = refusedStreamsTotal
		default:
			g.open[peer]++
			g.total++
		}
		g.mu.Unlock()
		if why != "" {
			c.Close()
			if g.onRefuse != nil {
				g.onRefuse(peer, why)
			}
			continue
		}
		gc := &guardedConn{Conn: c, g: g, peer: peer}
		select {
		case g.streams <- gc:
		case <-g.done:
			gc.Close()
			return
		}
	}
}

// keys are the mesh's keys, the primary first; none for an insecure mesh.
func (g *streamGuard) keys() [][]byte {
	if g.keyring == nil {
		return nil
	}
	return g.keyring.GetKeys()
}

// left is what the byte bound has left.
func (g *streamGuard) left() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return max(0, g.maxBytes-g.bytes)
}

// take counts n more bytes read or reserved by a stream; it reports
// whether they fit.
func (g *streamGuard) take(n int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.bytes+n > g.maxBytes {
		return false
	}
	g.bytes += n
	return true
}

// release gives back a closed stream's bytes, and an inbound one's
// slots.
func (g *streamGuard) release(peer string, bytes int64, slots bool) {
	g.mu.Lock()
	if slots {
		if g.open[peer]--; g.open[peer] <= 0 {
			delete(g.open, peer)
		}
		g.total--
	}
	g.bytes -= bytes
	g.mu.Unlock()
}

// guardedConn reads the head of its stream before memberlist does
// (streamcheck.go), counts what it reads past streamFreeBytes and what its
// head reserves against the guard's byte bound, fails the read that would
// pass it, and gives its slots and bytes back once, when closed.
// memberlist reads a stream on one goroutine.
type guardedConn struct {
	net.Conn
	g       *streamGuard
	peer    string
	read    int64 // bytes read
	counted int64 // bytes read or reserved past streamFreeBytes, counted against the byte bound
	extra   int64 // of them, reserved for what memberlist allocates beyond the bytes read
	checked bool
	replay  []byte // what the check read, handed to memberlist first
	failed  bool
	dialled bool // dialled by this member: holds no inbound slots
	once    sync.Once
}

func (c *guardedConn) Read(p []byte) (int, error) {
	if !c.checked {
		c.checked = true
		if err := c.check(); err != nil {
			c.fail()
		}
	}
	if c.failed {
		return 0, errStreamBytes
	}
	if len(c.replay) > 0 {
		n := copy(p, c.replay)
		if c.replay = c.replay[n:]; len(c.replay) == 0 {
			c.replay = nil // not held for the stream's life
		}
		return n, nil
	}
	return c.readCounted(p)
}

// readCounted reads the stream, its bytes past streamFreeBytes counted
// (unless reserved before: reserveReads).
func (c *guardedConn) readCounted(p []byte) (int, error) {
	if c.failed {
		return 0, errStreamBytes
	}
	n, err := c.Conn.Read(p)
	c.read += int64(n)
	if over := c.read - streamFreeBytes - c.reads(); over > 0 {
		if !c.reserve(over) {
			c.fail()
			return 0, errStreamBytes
		}
	}
	return n, err
}

// reads is how much of counted stands for bytes read: what was reserved
// for reads ahead of them (reserveReads) counts as read.
func (c *guardedConn) reads() int64 { return c.counted - c.extra }

// reserveReads reserves the next n bytes of the stream ahead of reading
// them.
func (c *guardedConn) reserveReads(n int64) bool {
	over := c.read + n - streamFreeBytes - c.reads()
	return over <= 0 || c.reserve(over)
}

// reserve counts n bytes against the guard's byte bound.
func (c *guardedConn) reserve(n int64) bool {
	if n <= 0 {
		return true
	}
	if !c.g.take(n) {
		return false
	}
	c.counted += n
	return true
}

// reserveExtra reserves n bytes of what memberlist allocates for the
// stream beyond the bytes it reads.
func (c *guardedConn) reserveExtra(n int64) bool {
	if !c.reserve(n) {
		return false
	}
	c.extra += max(0, n)
	return true
}

func (c *guardedConn) fail() {
	if c.failed {
		return
	}
	c.failed = true
	if c.g.onRefuse != nil {
		c.g.onRefuse(c.peer, refusedStreamBytes)
	}
}

func (c *guardedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.g.release(c.peer, c.counted, !c.dialled) })
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
