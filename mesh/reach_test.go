package mesh

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// A node's proven address is where Send goes, whatever memberlist's table
// says: here a name memberlist never heard of, reached at the address it
// proved (a listener that counts the connections).
func TestSendGoesToProvenAddr(t *testing.T) {
	agg := start(t, "agg", gwpb.Role_ROLE_AGGREGATOR, nil)
	env := &gwpb.Envelope{Body: &gwpb.Envelope_Ack{Ack: &gwpb.ControlAck{Id: "x"}}}
	if err := agg.Send("ghost", env); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("send to a name never seen nor proven: %v, want ErrUnknownMember", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		accepted <- struct{}{}
		conn.Close()
	}()
	if err := agg.SetProvenAddr("ghost", l.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if got, ok := agg.ProvenAddr("ghost"); !ok || got != l.Addr().String() {
		t.Fatalf("ProvenAddr = %q, %v", got, ok)
	}
	// The send itself may fail (the listener speaks no memberlist); the
	// connection is what shows where it went.
	_ = agg.Send("ghost", env)
	select {
	case <-accepted:
	case <-time.After(30 * time.Second):
		t.Fatal("the send did not connect to the proven address within 30 s")
	}
}

func TestSetProvenAddrRefuses(t *testing.T) {
	m := &Mesh{reach: map[string]netip.AddrPort{}}
	for _, addr := range []string{"", "n1", "127.0.0.1", "127.0.0.1:0", "0.0.0.0:7946", "[::]:7946", "224.0.0.1:7946", "n1.example:7946"} {
		if err := m.SetProvenAddr("n1", addr); err == nil {
			t.Errorf("SetProvenAddr(%q) accepted", addr)
		}
	}
	if _, ok := m.ProvenAddr("n1"); ok {
		t.Fatal("a refused address was kept")
	}
	if err := m.SetProvenAddr("n1", "[::ffff:10.1.2.3]:7946"); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.ProvenAddr("n1"); got != "10.1.2.3:7946" {
		t.Errorf("a v4-mapped address kept as %q, want 10.1.2.3:7946", got)
	}
	// Bounded: past maxProvenAddrs a new name is refused, a known one
	// still moves.
	for i := len(m.reach); i < maxProvenAddrs; i++ {
		if err := m.SetProvenAddr(fmt.Sprintf("x%d", i), "10.0.0.1:7946"); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.SetProvenAddr("one-too-many", "10.0.0.2:7946"); err == nil {
		t.Error("a name past the bound accepted")
	}
	if err := m.SetProvenAddr("n1", "10.1.2.4:7946"); err != nil {
		t.Errorf("a known node's move refused at the bound: %v", err)
	}
	if len(m.reach) != maxProvenAddrs {
		t.Errorf("%d addresses kept, bound %d", len(m.reach), maxProvenAddrs)
	}
}
