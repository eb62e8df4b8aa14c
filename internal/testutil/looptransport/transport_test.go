package looptransport

import (
	"io"
	"net"
	"testing"
	"time"
)

// A packet and a stream go from one transport to another over loopback,
// and Shutdown ends both listeners.
func TestPacketAndStream(t *testing.T) {
	a, err := New("127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown()
	b, err := New("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ip, port, err := b.FinalAdvertiseAddr("", 0)
	if err != nil || !ip.IsLoopback() || port == 0 {
		t.Fatalf("advertise %v:%d, %v", ip, port, err)
	}
	bAddr := b.tcp.Addr().String()
	if _, err := a.WriteTo([]byte("ping"), bAddr); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-b.PacketCh():
		if string(p.Buf) != "ping" || p.From.String() != a.udp.LocalAddr().String() {
			t.Fatalf("packet %q from %v", p.Buf, p.From)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no packet")
	}
	c, err := a.DialTimeout(bAddr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("stream")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	select {
	case s := <-b.StreamCh():
		// From a's own address, as a node's connections come from its IP.
		if ip := s.RemoteAddr().(*net.TCPAddr).IP.String(); ip != "127.0.0.2" {
			t.Errorf("stream from %s, want a's address 127.0.0.2", ip)
		}
		got, _ := io.ReadAll(s)
		s.Close()
		if string(got) != "stream" {
			t.Fatalf("stream %q", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no stream")
	}
	if err := b.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.DialTimeout(bAddr, time.Second); err == nil {
		t.Fatal("dial after Shutdown succeeded")
	}
}
