package mesh

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/testutil/looptransport"
	"github.com/hashicorp/memberlist"
)

// feedTransport is a transport whose inbound streams the test hands in.
type feedTransport struct {
	memberlist.Transport
	ch chan net.Conn
}

func (f *feedTransport) StreamCh() <-chan net.Conn { return f.ch }

// guardFeed is a stream guard over a feedTransport, with its refusals
// recorded.
type guardFeed struct {
	*streamGuard
	feed chan net.Conn
	l    net.Listener
	mu   sync.Mutex
	refs []string // "peer why"
}

func newGuardFeed(t *testing.T) *guardFeed {
	t.Helper()
	inner, err := looptransport.New("127.0.0.3:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gf := &guardFeed{feed: make(chan net.Conn), l: l}
	gf.streamGuard = guardStreams(&feedTransport{Transport: inner, ch: gf.feed}, nil, maxStreamsPerPeer, "", nil, func(peer, why string) {
		gf.mu.Lock()
		gf.refs = append(gf.refs, peer+" "+why)
		gf.mu.Unlock()
	})
	t.Cleanup(func() { gf.Shutdown(); l.Close() })
	return gf
}

// stream opens a TCP stream from ip to the guard, writes payload and closes
// its write side; it returns the stream as the guard hands it on, or nil
// if the guard closed it at once.
func (gf *guardFeed) stream(t *testing.T, ip string, payload []byte) net.Conn {
	t.Helper()
	out, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).Dial("tcp", gf.l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	go func() {
		out.Write(payload)
		out.(*net.TCPConn).CloseWrite()
	}()
	in, err := gf.l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	before := gf.refusals()
	gf.feed <- in
	// Handed on, or refused (recorded before the guard takes the next).
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		select {
		case c := <-gf.StreamCh():
			return c
		case <-time.After(time.Millisecond):
		}
		if gf.refusals() > before {
			return nil
		}
	}
	t.Fatalf("the stream from %s was neither handed on nor refused within 30 s", ip)
	return nil
}

func (gf *guardFeed) last() string {
	gf.mu.Lock()
	defer gf.mu.Unlock()
	if len(gf.refs) == 0 {
		return ""
	}
	return gf.refs[len(gf.refs)-1]
}

func (gf *guardFeed) refusals() int {
	gf.mu.Lock()
	defer gf.mu.Unlock()
	return len(gf.refs)
}

// Past maxStreamsTotal open streams from all peers, a new one is closed at
// once, whatever its source; a closed one frees its slot.
func TestStreamsBoundedInTotal(t *testing.T) {
	gf := newGuardFeed(t)
	gf.maxTotal = 3
	var open []net.Conn
	for _, ip := range []string{"127.0.0.11", "127.0.0.12", "127.0.0.13"} {
		c := gf.stream(t, ip, []byte("x"))
		if c == nil {
			t.Fatalf("stream from %s refused below the bound", ip)
		}
		open = append(open, c)
	}
	if c := gf.stream(t, "127.0.0.14", []byte("x")); c != nil {
		t.Fatal("a fourth stream handed on past a total bound of 3")
	}
	if got := gf.last(); got != "127.0.0.14 "+refusedStreamsTotal {
		t.Errorf("refusal %q", got)
	}
	open[0].Close()
	if c := gf.stream(t, "127.0.0.14", []byte("x")); c == nil {
		t.Fatal("a stream refused after one of the three closed")
	} else {
		c.Close()
	}
}

// The streams open at once read at most maxBytes past their first
// streamFreeBytes each: the read that would pass it fails; small streams
// pass meanwhile; a closed stream gives its bytes back.
func TestStreamBytesBoundedInTotal(t *testing.T) {
	gf := newGuardFeed(t)
	gf.maxBytes = 100 << 10
	big := bytes.Repeat([]byte("b"), streamFreeBytes+90<<10) // 90 KiB counted
	a := gf.stream(t, "127.0.0.21", big)
	if n, err := io.Copy(io.Discard, a); err != nil || n != int64(len(big)) {
		t.Fatalf("first big stream: read %d, %v", n, err)
	}
	b := gf.stream(t, "127.0.0.22", big)
	if _, err := io.Copy(io.Discard, b); !errors.Is(err, errStreamBytes) {
		t.Fatalf("second big stream while the first holds 90 of 100 KiB: %v, want errStreamBytes", err)
	}
	b.Close()
	if got := gf.last(); got != "127.0.0.22 "+refusedStreamBytes {
		t.Errorf("refusal %q", got)
	}
	small := gf.stream(t, "127.0.0.23", bytes.Repeat([]byte("s"), 10<<10))
	if n, err := io.Copy(io.Discard, small); err != nil || n != 10<<10 {
		t.Fatalf("small stream while the bytes are held: read %d, %v", n, err)
	}
	small.Close()
	a.Close()
	c := gf.stream(t, "127.0.0.24", big)
	if n, err := io.Copy(io.Discard, c); err != nil || n != int64(len(big)) {
		t.Fatalf("big stream after the first closed: read %d, %v", n, err)
	}
	c.Close()
	gf.streamGuard.mu.Lock()
	defer gf.streamGuard.mu.Unlock()
	if gf.bytes != 0 || gf.total != 0 {
		t.Errorf("after every stream closed: %d bytes, %d streams counted", gf.bytes, gf.total)
	}
}
