package mesh

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// sealPacket is an encrypted packet as memberlist makes it: label header,
// then [version 1][nonce][AES-GCM], the label authenticated.
func sealPacket(t testing.TB, kr *memberlist.Keyring, plain []byte) []byte {
	t.Helper()
	return seal(t, kr, plain, false)
}

// compound is memberlist's compound message of parts.
func compound(parts ...[]byte) []byte {
	out := []byte{mlCompoundMsg, byte(len(parts))}
	for _, p := range parts {
		out = binary.BigEndian.AppendUint16(out, uint16(len(p)))
	}
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func userMessage(t testing.TB, body []byte) []byte {
	return message(t, mlUserMsg, &mlUserMsgHeader{UserMsgLen: len(body)}, body)
}

// A packet whose compressed messages expand past 64 KiB in all is dropped,
// however they are nested (one compressed message, a compound of many, a
// compressed message inside another); what memberlist makes to fit a UDP
// buffer, and what memberlist refuses by itself, passes.
func TestPacketFits(t *testing.T) {
	kr := checkKeyring(t)
	keys := kr.GetKeys()
	oneK := compressed(t, userMessage(t, bytes.Repeat([]byte("k"), 1<<10)))
	nested := compressed(t, userMessage(t, bytes.Repeat([]byte("n"), 8<<10)))
	for range maxPacketDepth + 1 {
		nested = compressed(t, nested)
	}
	var many [][]byte
	for range 80 {
		many = append(many, oneK)
	}
	crc := func(b []byte) []byte { return append([]byte{mlHasCrcMsg, 0, 0, 0, 0}, b...) }
	for _, c := range []struct {
		name   string
		packet []byte
		fits   bool
	}{
		{"a compressed message of 1 MB", compressed(t, userMessage(t, bytes.Repeat([]byte("m"), 1<<20))), false},
		{"the same with a checksum", crc(compressed(t, userMessage(t, bytes.Repeat([]byte("m"), 1<<20)))), false},
		{"80 compressed parts of 1 KB", compound(many...), false},
		{"a compressed message of 1 MB in a compound", compound(compressed(t, userMessage(t, bytes.Repeat([]byte("c"), 1<<20)))), false},
		{"compressed messages nested past the depth", nested, false},
		{"40 compressed parts of 1 KB", compound(many[:40]...), true},
		{"a compressed message of 1,400 bytes", compressed(t, userMessage(t, bytes.Repeat([]byte("u"), 1400))), true},
		{"a plain message", userMessage(t, []byte("plain")), true},
		{"a cut compound", compound(oneK)[:10], true},
		{"garbage", []byte{mlCompressMsg, 0xff, 0x01}, true},
	} {
		if got := packetFits(sealPacket(t, kr, c.packet), checkLabel, keys); got != c.fits {
			t.Errorf("%s, encrypted: fits %v, want %v", c.name, got, c.fits)
		}
		if got := packetFits(c.packet, checkLabel, nil); got != c.fits {
			t.Errorf("%s, insecure: fits %v, want %v", c.name, got, c.fits)
		}
	}
	// Another mesh's key: memberlist drops it itself.
	if !packetFits(sealPacket(t, checkKeyring(t), compressed(t, userMessage(t, make([]byte, 1<<20)))), checkLabel, keys) {
		t.Error("a packet of another key is dropped by the check: memberlist should say why")
	}
}

// packetFeed is a transport whose inbound packets the test hands in.
type packetFeed struct {
	memberlist.Transport
	ch chan *memberlist.Packet
}

func (f *packetFeed) PacketCh() <-chan *memberlist.Packet { return f.ch }
func (f *packetFeed) StreamCh() <-chan net.Conn           { return nil }
func (f *packetFeed) Shutdown() error                     { return nil }

// The guard hands memberlist the packets that fit, in order, and drops
// the others, counting each under packet_expansion.
func TestPacketsGuarded(t *testing.T) {
	kr := checkKeyring(t)
	feed := &packetFeed{ch: make(chan *memberlist.Packet)}
	refused := make(chan string, 4)
	g := guardStreams(feed, nil, maxStreamsPerPeer, checkLabel, kr, func(peer, why string) { refused <- peer + " " + why })
	defer g.Shutdown()
	from := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 61), Port: 7946}
	small := sealPacket(t, kr, userMessage(t, []byte("small")))
	big := sealPacket(t, kr, compressed(t, userMessage(t, make([]byte, 1<<20))))
	go func() {
		for _, b := range [][]byte{small, big, small} {
			feed.ch <- &memberlist.Packet{Buf: b, From: from, Timestamp: time.Now()}
		}
	}()
	for i := range 2 {
		select {
		case p := <-g.PacketCh():
			if !bytes.Equal(p.Buf, small) {
				t.Fatalf("packet %d handed on is not the small one", i)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no packet handed on within 30 s")
		}
	}
	select {
	case r := <-refused:
		if r != "127.0.0.61 "+refusedPacketExpansion {
			t.Errorf("refusal %q", r)
		}
	default:
		t.Error("the big packet was not counted as refused before the packet after it was handed on")
	}
}

// FuzzPacketFits: whatever a packet carries, the check returns without
// panicking and expands at most its bound.
func FuzzPacketFits(f *testing.F) {
	kr := checkKeyring(f)
	f.Add([]byte{}, false)
	f.Add(compound(userMessage(f, []byte("a")), compressed(f, userMessage(f, []byte("b")))), false)
	f.Add(sealPacket(f, kr, compressed(f, userMessage(f, bytes.Repeat([]byte("z"), 100)))), true)
	f.Fuzz(func(t *testing.T, b []byte, secure bool) {
		var keys [][]byte
		if secure {
			keys = kr.GetKeys()
		}
		packetFits(b, checkLabel, keys)
	})
}
