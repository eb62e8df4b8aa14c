package mesh

import (
	"net"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/testutil/looptransport"
)

// A member's streams come from the IP it bound (the receiver's per-peer
// bound counts source addresses); where it bound none, or one of the other
// family, the kernel chooses.
func TestStreamsDialledFromTheBoundAddress(t *testing.T) {
	for _, c := range []struct {
		bound, to string
		want      string // "" : nil
	}{
		{"127.0.0.4", "127.0.0.1:7946", "127.0.0.4"},
		{"0.0.0.0", "127.0.0.1:7946", ""},
		{"", "127.0.0.1:7946", ""},
		{"::1", "127.0.0.1:7946", ""},
		{"127.0.0.4", "[::1]:7946", ""},
		{"127.0.0.4", "not an address", ""},
	} {
		got := dialFrom(net.ParseIP(c.bound), c.to)
		if (got == nil) != (c.want == "") || (got != nil && got.IP.String() != c.want) {
			t.Errorf("dialFrom(%q, %q) = %v, want %q", c.bound, c.to, got, c.want)
		}
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	inner, err := looptransport.New("127.0.0.3:0")
	if err != nil {
		t.Fatal(err)
	}
	g := guardStreams(inner, net.ParseIP("127.0.0.4"), maxStreamsPerPeer, "", nil, nil)
	defer g.Shutdown()
	c, err := g.DialTimeout(l.Addr().String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	in, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if ip := in.RemoteAddr().(*net.TCPAddr).IP.String(); ip != "127.0.0.4" {
		t.Errorf("stream from %s, want the bound 127.0.0.4", ip)
	}
}
