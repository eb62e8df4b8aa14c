package mesh

import (
	"bytes"
	"compress/lzw"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/memberlist"
)

const checkLabel = "gracewatch"

func checkKeyring(t testing.TB) *memberlist.Keyring {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	kr, err := memberlist.NewKeyring(nil, key)
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

// captureStream is what a real memberlist writes on a stream when it sends
// msg reliably: label header, encrypted frame, compressed or not.
func captureStream(t *testing.T, kr *memberlist.Keyring, compress bool, msg []byte) []byte {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	mc := memberlist.DefaultLocalConfig()
	mc.Name, mc.BindAddr, mc.BindPort, mc.AdvertisePort = "sender", "127.0.0.1", 0, 0
	mc.Label, mc.Keyring, mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = checkLabel, kr, true, true
	mc.EnableCompression = compress
	mc.LogOutput = io.Discard
	mc.Logger = nil
	ml, err := memberlist.Create(mc)
	if err != nil {
		t.Fatal(err)
	}
	defer ml.Shutdown()
	got := make(chan []byte, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		got <- b
	}()
	port := l.Addr().(*net.TCPAddr).Port
	if err := ml.SendReliable(&memberlist.Node{Name: "receiver", Addr: net.IPv4(127, 0, 0, 1), Port: uint16(port)}, msg); err != nil {
		t.Fatal(err)
	}
	ml.Shutdown()
	b := <-got
	if len(b) == 0 {
		t.Fatal("nothing captured")
	}
	return b
}

// seal is plain encrypted as memberlist does under kr's primary key,
// after the label header: [version 1][nonce][AES-GCM], the label
// authenticated. A stream's frame (frame true) puts [encryptMsg][length]
// before it, authenticated too; a packet has none.
func seal(t testing.TB, kr *memberlist.Keyring, plain []byte, frame bool) []byte {
	t.Helper()
	block, err := aes.NewCipher(kr.GetPrimaryKey())
	if err != nil {
		t.Fatal(err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		t.Fatal(err)
	}
	nonce := make([]byte, mlNonceSize)
	rand.Read(nonce)
	var head []byte
	if frame {
		head = binary.BigEndian.AppendUint32([]byte{mlEncryptMsg}, uint32(1+mlNonceSize+len(plain)+gcm.Overhead()))
	}
	out := append([]byte{mlHasLabelMsg, byte(len(checkLabel))}, checkLabel...)
	out = append(append(append(out, head...), 1), nonce...)
	return gcm.Seal(out, nonce, plain, append(head, checkLabel...))
}

// sealFrame is an encrypted stream of plain as memberlist frames it.
func sealFrame(t testing.TB, kr *memberlist.Keyring, plain []byte) []byte {
	t.Helper()
	return seal(t, kr, plain, true)
}

// message is a memberlist message of type t: its header then body.
func message(t testing.TB, typ byte, header any, body []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteByte(typ)
	if err := codec.NewEncoder(&b, &codec.MsgpackHandle{}).Encode(header); err != nil {
		t.Fatal(err)
	}
	b.Write(body)
	return b.Bytes()
}

// compressed wraps a message as memberlist compresses it.
func compressed(t testing.TB, msg []byte) []byte {
	t.Helper()
	var z bytes.Buffer
	w := lzw.NewWriter(&z, lzw.LSB, mlLZWLitWidth)
	w.Write(msg)
	w.Close()
	return message(t, mlCompressMsg, &mlCompress{Algo: mlLZWAlgo, Buf: z.Bytes()}, nil)
}

func secureGuardFeed(t *testing.T) (*guardFeed, *memberlist.Keyring) {
	gf := newGuardFeed(t)
	kr := checkKeyring(t)
	gf.keyring, gf.label = kr, checkLabel
	return gf, kr
}

// readAll reads a stream the guard handed on as memberlist would, to its
// end or the guard's refusal.
func readAll(c net.Conn) ([]byte, error) {
	defer c.SetReadDeadline(time.Time{})
	c.SetReadDeadline(time.Now().Add(time.Minute))
	return io.ReadAll(c)
}

func (gf *guardFeed) held() int64 {
	gf.streamGuard.mu.Lock()
	defer gf.streamGuard.mu.Unlock()
	return gf.bytes
}

// A compressed message counts at the size memberlist expands it to, not
// the few KB it is on the wire: of two maximal messages of one repeated
// letter (10 MB each, a few KB on the wire), the second does not fit the
// 16 MiB the first holds with it; once the first closes it does. What the
// guard reads is handed on byte for byte.
func TestStreamCheckCountsExpansion(t *testing.T) {
	gf, kr := secureGuardFeed(t)
	wire := captureStream(t, kr, true, bytes.Repeat([]byte("a"), 10<<20))
	if len(wire) > streamFreeBytes {
		t.Fatalf("a compressed message of one letter is %d bytes on the wire: the test wants it under the free %d", len(wire), streamFreeBytes)
	}
	a := gf.stream(t, "127.0.0.31", wire)
	got, err := readAll(a)
	if err != nil || !bytes.Equal(got, wire) {
		t.Fatalf("first stream: read %d of %d bytes, %v", len(got), len(wire), err)
	}
	if held := gf.held(); held < 10<<20 {
		t.Errorf("the open stream holds %d bytes of the bound: want at least its expanded 10 MiB", held)
	}
	b := gf.stream(t, "127.0.0.32", wire)
	if _, err := readAll(b); !errors.Is(err, errStreamBytes) {
		t.Fatalf("second stream while the first is open: %v, want errStreamBytes", err)
	}
	b.Close()
	if got := gf.last(); got != "127.0.0.32 "+refusedStreamBytes {
		t.Errorf("refusal %q", got)
	}
	a.Close()
	c := gf.stream(t, "127.0.0.33", wire)
	if got, err := readAll(c); err != nil || !bytes.Equal(got, wire) {
		t.Fatalf("a stream after the first closed: read %d of %d bytes, %v", len(got), len(wire), err)
	}
	c.Close()
	if held := gf.held(); held != 0 {
		t.Errorf("after every stream closed: %d bytes held", held)
	}
}

// What a header declares and memberlist allocates before it reads is
// reserved: a push-pull of 2^20 nodes (117 MB of node states) or a user
// message of 20 MB in a stream of a few bytes is refused, encrypted or on
// an insecure mesh; an honest push-pull of 1,000 nodes is handed on with
// its node states reserved.
func TestStreamCheckHeaderLies(t *testing.T) {
	nodeSize := int64(112)
	lies := []struct {
		name string
		msg  func(t *testing.T) []byte
	}{
		{"push-pull of 2^20 nodes", func(t *testing.T) []byte {
			return message(t, mlPushPullMsg, &mlPushPullHeader{Nodes: mlMaxPushStateNodes}, nil)
		}},
		{"push-pull with 20 MB of user state", func(t *testing.T) []byte {
			return message(t, mlPushPullMsg, &mlPushPullHeader{UserStateLen: mlMaxPushStateBytes}, []byte("tiny"))
		}},
		{"user message of 20 MB", func(t *testing.T) []byte {
			return message(t, mlUserMsg, &mlUserMsgHeader{UserMsgLen: mlMaxUserMsgBytes}, []byte("tiny"))
		}},
		{"compressed push-pull of 2^20 nodes", func(t *testing.T) []byte {
			return compressed(t, message(t, mlPushPullMsg, &mlPushPullHeader{Nodes: mlMaxPushStateNodes}, nil))
		}},
	}
	for _, lie := range lies {
		t.Run(lie.name+", encrypted", func(t *testing.T) {
			gf, kr := secureGuardFeed(t)
			c := gf.stream(t, "127.0.0.41", sealFrame(t, kr, lie.msg(t)))
			if _, err := readAll(c); !errors.Is(err, errStreamBytes) {
				t.Fatalf("%v, want errStreamBytes", err)
			}
			c.Close()
		})
		t.Run(lie.name+", insecure", func(t *testing.T) {
			gf := newGuardFeed(t)
			c := gf.stream(t, "127.0.0.42", lie.msg(t))
			if _, err := readAll(c); !errors.Is(err, errStreamBytes) {
				t.Fatalf("%v, want errStreamBytes", err)
			}
			c.Close()
		})
	}
	t.Run("an honest push-pull of a full member table", func(t *testing.T) {
		gf, kr := secureGuardFeed(t)
		var body bytes.Buffer
		enc := codec.NewEncoder(&body, &codec.MsgpackHandle{})
		meta := make([]byte, 120) // a signed meta is mostly random bytes
		for i := range DefaultMaxMembers {
			rand.Read(meta)
			enc.Encode(&mlPushNodeState{Name: fmt.Sprintf("node%05d", i), Addr: []byte{10, byte(i >> 8), byte(i), 1},
				Port: 7946, Meta: meta, Incarnation: 3, Vsn: []uint8{1, 5, 2, 2, 5, 4}})
		}
		msg := message(t, mlPushPullMsg, &mlPushPullHeader{Nodes: DefaultMaxMembers}, body.Bytes())
		wire := sealFrame(t, kr, compressed(t, msg))
		c := gf.stream(t, "127.0.0.43", wire)
		got, err := readAll(c)
		if err != nil || !bytes.Equal(got, wire) {
			t.Fatalf("read %d of %d bytes, %v", len(got), len(wire), err)
		}
		held := gf.held()
		t.Logf("%d members: %.1f MB on the wire, %.1f MB expanded, %.1f MB held against the bound", DefaultMaxMembers,
			float64(len(wire))/1e6, float64(len(msg))/1e6, float64(held)/1e6)
		if held < int64(DefaultMaxMembers)*nodeSize+int64(len(msg)) {
			t.Errorf("holds %d bytes: want the expanded message and its node states reserved", held)
		}
		if held > maxStreamBytes*3/4 {
			t.Errorf("holds %d bytes of the bound %d: want a quarter left for the small messages meanwhile", held, maxStreamBytes)
		}
		c.Close()
	})
}

// A stream memberlist refuses itself (a key the mesh does not have, a
// plain stream to an encrypted mesh, a frame cut short) is handed on byte
// for byte, not refused by the guard: memberlist says why.
func TestStreamCheckHandsOnWhatMemberlistRefuses(t *testing.T) {
	gf, _ := secureGuardFeed(t)
	other := checkKeyring(t)
	cases := map[string][]byte{
		"another key":  sealFrame(t, other, message(t, mlUserMsg, &mlUserMsgHeader{UserMsgLen: 4}, []byte("four"))),
		"plain stream": message(t, mlUserMsg, &mlUserMsgHeader{UserMsgLen: 4}, []byte("four")),
		"cut short":    sealFrame(t, other, []byte("x"))[:20],
		"empty":        {},
	}
	for name, wire := range cases {
		c := gf.stream(t, "127.0.0.51", wire)
		got, err := readAll(c)
		if err != nil || !bytes.Equal(got, wire) {
			t.Errorf("%s: read %d of %d bytes, %v", name, len(got), len(wire), err)
		}
		c.Close()
	}
	if n := gf.refusals(); n != 0 {
		t.Errorf("%d refusals", n)
	}
}

// byteConn is a net.Conn that reads b.
type byteConn struct {
	net.Conn
	r *bytes.Reader
}

func (c byteConn) Read(p []byte) (int, error) { return c.r.Read(p) }
func (c byteConn) Close() error               { return nil }

// FuzzStreamCheck: whatever a stream carries, the check does not panic,
// and what it does not refuse is handed on byte for byte; what it reserves
// stays within the bound and is given back at close.
func FuzzStreamCheck(f *testing.F) {
	kr := checkKeyring(f)
	f.Add([]byte{}, false)
	f.Add(message(f, mlUserMsg, &mlUserMsgHeader{UserMsgLen: 4}, []byte("four")), false)
	f.Add(compressed(f, message(f, mlPushPullMsg, &mlPushPullHeader{Nodes: 3}, nil)), false)
	f.Add(sealFrame(f, kr, compressed(f, message(f, mlUserMsg, &mlUserMsgHeader{UserMsgLen: 4}, []byte("four")))), true)
	f.Add([]byte{mlHasLabelMsg, 3, 'a', 'b', 'c', mlEncryptMsg, 0xff, 0xff, 0xff, 0xff}, true)
	f.Fuzz(func(t *testing.T, wire []byte, secure bool) {
		g := &streamGuard{maxBytes: 1 << 20, open: map[string]int{"p": 1}, total: 1, label: checkLabel}
		if secure {
			g.keyring = kr
		}
		c := &guardedConn{Conn: byteConn{r: bytes.NewReader(wire)}, g: g, peer: "p"}
		got, err := io.ReadAll(c)
		switch {
		case errors.Is(err, errStreamBytes):
		case err != nil:
			t.Fatalf("read: %v", err)
		case !bytes.Equal(got, wire):
			t.Fatalf("handed on %d bytes of %d, not the same", len(got), len(wire))
		}
		if g.bytes > g.maxBytes {
			t.Fatalf("%d bytes held past the bound %d", g.bytes, g.maxBytes)
		}
		c.Close()
		if g.bytes != 0 || g.total != 0 {
			t.Fatalf("after close: %d bytes, %d streams", g.bytes, g.total)
		}
	})
}

// The answer on a stream this member dialled (a push-pull's, a ping's ack)
// is checked as an inbound stream is: a peer that answers a push-pull with
// a header of 2^20 nodes is dropped before memberlist allocates them; the
// dialled stream holds no inbound slot, and its bytes come back at close.
func TestStreamCheckOnDialledStreams(t *testing.T) {
	gf, kr := secureGuardFeed(t)
	lie := sealFrame(t, kr, message(t, mlPushPullMsg, &mlPushPullHeader{Nodes: mlMaxPushStateNodes}, nil))
	honest := sealFrame(t, kr, message(t, mlPushPullMsg, &mlPushPullHeader{}, nil))
	for _, c := range []struct {
		name   string
		answer []byte
		want   error
	}{{"a lying answer", lie, errStreamBytes}, {"an honest answer", honest, nil}} {
		go func() {
			in, err := gf.l.Accept()
			if err != nil {
				return
			}
			in.Write(c.answer)
			in.Close()
		}()
		out, err := gf.DialTimeout(gf.l.Addr().String(), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		got, err := readAll(out)
		if !errors.Is(err, c.want) || (c.want == nil && !bytes.Equal(got, c.answer)) {
			t.Errorf("%s: read %d bytes, %v; want %v", c.name, len(got), err, c.want)
		}
		out.Close()
	}
	gf.streamGuard.mu.Lock()
	defer gf.streamGuard.mu.Unlock()
	if gf.bytes != 0 || gf.total != 0 || len(gf.open) != 0 {
		t.Errorf("after close: %d bytes, %d streams, %v open", gf.bytes, gf.total, gf.open)
	}
}

// BenchmarkStreamCheck: what reading a stream's head costs per stream,
// for a state update (4 KB) and a push-pull of a full member table, both
// as memberlist sends them (encrypted, compressed).
func BenchmarkStreamCheck(b *testing.B) {
	kr := checkKeyring(b)
	var body bytes.Buffer
	enc := codec.NewEncoder(&body, &codec.MsgpackHandle{})
	meta := make([]byte, 120)
	for i := range DefaultMaxMembers {
		rand.Read(meta)
		enc.Encode(&mlPushNodeState{Name: fmt.Sprintf("node%05d", i), Addr: []byte{10, byte(i >> 8), byte(i), 1},
			Port: 7946, Meta: meta, Incarnation: 3, Vsn: []uint8{1, 5, 2, 2, 5, 4}})
	}
	update := make([]byte, 4<<10)
	rand.Read(update)
	for _, c := range []struct {
		name string
		wire []byte
	}{
		{"state-update-4KB", sealFrame(b, kr, compressed(b, userMessage(b, update)))},
		{"push-pull-16384-members", sealFrame(b, kr, compressed(b, message(b, mlPushPullMsg, &mlPushPullHeader{Nodes: DefaultMaxMembers}, body.Bytes())))},
	} {
		b.Run(c.name, func(b *testing.B) {
			g := &streamGuard{maxBytes: maxStreamBytes, open: map[string]int{}, label: checkLabel, keyring: kr}
			b.SetBytes(int64(len(c.wire)))
			b.ReportAllocs()
			for b.Loop() {
				gc := &guardedConn{Conn: byteConn{r: bytes.NewReader(c.wire)}, g: g, peer: "p", dialled: true}
				if err := gc.check(); err != nil {
					b.Fatal(err)
				}
				gc.Close()
			}
		})
	}
}

// The check reads no further than the message's head: a peer that sends a
// push-pull and then waits for the answer (as memberlist does) is not
// waited on, on an insecure mesh (unframed) too.
func TestStreamCheckReadsNoFurtherThanTheHead(t *testing.T) {
	msg := compressed(t, message(t, mlPushPullMsg, &mlPushPullHeader{Nodes: 1}, []byte{0x80}))
	plain := message(t, mlPushPullMsg, &mlPushPullHeader{Nodes: 1}, []byte{0x80})
	for _, c := range []struct {
		name   string
		secure bool
		msg    []byte
	}{{"insecure, compressed", false, msg}, {"insecure", false, plain}, {"encrypted", true, msg}} {
		gf := newGuardFeed(t)
		wire := c.msg
		if c.secure {
			kr := checkKeyring(t)
			gf.keyring, gf.label = kr, checkLabel
			wire = sealFrame(t, kr, c.msg)
		}
		out, err := net.Dial("tcp", gf.l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		out.Write(wire) // and waits: no close
		in, err := gf.l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		gf.feed <- in
		got := <-gf.StreamCh()
		got.SetReadDeadline(time.Now().Add(time.Minute))
		buf := make([]byte, len(wire))
		if _, err := io.ReadFull(got, buf); err != nil || !bytes.Equal(buf, wire) {
			t.Errorf("%s: the message not handed on while its sender waits: %v", c.name, err)
		}
		got.Close()
	}
}
