// Package looptransport is a memberlist transport for benchmarks that run
// hundreds of members in one process: real sockets, less garbage.
package looptransport

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Transport is a memberlist.Transport for benchmarks that run many members
// in one process on loopback: real UDP and TCP sockets on one address, as memberlist's NetTransport,
// but each UDP packet is read into one reused buffer and only its bytes
// are copied out (NetTransport allocates 64 KiB per packet, which with
// hundreds of members in one process makes the garbage collector the
// bottleneck), and destinations are parsed, not resolved. Timing is
// unchanged: packets go through the kernel as before.
type Transport struct {
	udp      *net.UDPConn
	tcp      *net.TCPListener
	packetCh chan *memberlist.Packet
	streamCh chan net.Conn
	done     chan struct{}
	closed   atomic.Bool
	wg       sync.WaitGroup
}

var _ memberlist.Transport = (*Transport)(nil)

// New listens on addr (an IP:port; UDP and TCP) and serves memberlist.
func New(addr string) (*Transport, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, err
	}
	tcp, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(ap))
	if err != nil {
		return nil, fmt.Errorf("tcp listener on %s: %w", addr, err)
	}
	// Port 0: UDP on the port TCP got, as memberlist wants one port.
	ap = netip.AddrPortFrom(ap.Addr(), uint16(tcp.Addr().(*net.TCPAddr).Port))
	udp, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap))
	if err != nil {
		tcp.Close()
		return nil, fmt.Errorf("udp listener on %s: %w", addr, err)
	}
	_ = udp.SetReadBuffer(2 << 20)
	t := &Transport{udp: udp, tcp: tcp, packetCh: make(chan *memberlist.Packet),
		streamCh: make(chan net.Conn), done: make(chan struct{})}
	t.wg.Add(2)
	go t.readPackets()
	go t.accept()
	return t, nil
}

func (t *Transport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	a := t.udp.LocalAddr().(*net.UDPAddr)
	return a.IP.To4(), a.Port, nil
}

func (t *Transport) WriteTo(b []byte, addr string) (time.Time, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return time.Time{}, err
	}
	_, err = t.udp.WriteToUDPAddrPort(b, ap)
	return time.Now(), err
}

func (t *Transport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }
func (t *Transport) StreamCh() <-chan net.Conn           { return t.streamCh }

// DialTimeout dials from this member's own address (port chosen by the
// kernel), as a node's connections come from its own IP: undialled, every
// member's streams would come from 127.0.0.1, one peer to the receiver's
// per-peer stream bound (mesh/transport.go), which refused most of a
// storm's simultaneous sends.
func (t *Transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	local := &net.TCPAddr{IP: t.tcp.Addr().(*net.TCPAddr).IP}
	return (&net.Dialer{Timeout: timeout, LocalAddr: local}).Dial("tcp", addr)
}

func (t *Transport) Shutdown() error {
	if t.closed.Swap(true) {
		return nil
	}
	close(t.done)
	t.tcp.Close()
	t.udp.Close()
	t.wg.Wait()
	return nil
}

func (t *Transport) readPackets() {
	defer t.wg.Done()
	buf := make([]byte, 65536)
	for {
		n, from, err := t.udp.ReadFromUDPAddrPort(buf)
		ts := time.Now()
		if err != nil {
			if t.closed.Load() {
				return
			}
			continue
		}
		if n < 1 {
			continue
		}
		p := &memberlist.Packet{Buf: bytes.Clone(buf[:n]), From: net.UDPAddrFromAddrPort(from), Timestamp: ts}
		select {
		case t.packetCh <- p:
		case <-t.done:
			return
		}
	}
}

func (t *Transport) accept() {
	defer t.wg.Done()
	for {
		c, err := t.tcp.AcceptTCP()
		if err != nil {
			if t.closed.Load() {
				return
			}
			time.Sleep(5 * time.Millisecond) // not a wait: a pause before accepting again after a failed accept (out of descriptors), as net/http does
			continue
		}
		select {
		case t.streamCh <- c:
		case <-t.done:
			c.Close()
			return
		}
	}
}
