package mesh

// The stream check: what a stream makes memberlist hold is not what it
// carries on the wire. memberlist (v0.7.0, net.go readStream and what
// follows it) reads an inbound stream's one message and then, before
// anything of gracewatch's sees it:
//
//   - expands a compressed message (LZW, inside the encryption) up to
//     40 MB: a maximal message of one repeated letter is a few KB on the
//     wire, under every stream's free bytes;
//   - allocates what the message's header declares before it reads it: a
//     push-pull's node states (make([]pushNodeState, Nodes), up to 2^20
//     of about 112 bytes each: 117 MB from a header of a few bytes) and
//     its user state (up to 20 MB), a user message's body (up to 20 MB);
//     a sender that then stalls holds it until the stream's timeout.
//
// So before memberlist reads a stream's first byte, the guard reads its
// head itself: the label header, the encrypted frame whole (its declared
// length reserved against the byte bound first), decrypts it with the
// mesh's keys, counts a compressed message's expanded size with a
// streaming decompression (nothing kept but its first bytes), and decodes
// the header of what is inside. The expanded size and what the header
// makes memberlist allocate are reserved against the same byte bound as
// the bytes read; a stream whose reservation does not fit is refused
// (stream_bytes) before memberlist allocates anything. memberlist then
// reads the same bytes from the start, and refuses what it refuses.

import (
	"bytes"
	"compress/lzw"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"io"
	"unsafe"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// memberlist's stream format (v0.7.0: net.go, security.go, label.go).
const (
	mlPushPullMsg   = 6
	mlUserMsg       = 8
	mlCompressMsg   = 9
	mlEncryptMsg    = 10
	mlHasLabelMsg   = 244
	mlLZWAlgo       = 0
	mlLZWLitWidth   = 8
	mlNonceSize     = 12
	mlMaxEncryptVsn = 1
	// The limits memberlist checks before it allocates (net.go).
	mlMaxPushStateBytes    = 20 << 20
	mlMaxPushStateNodes    = 1 << 20
	mlMaxUserMsgBytes      = 20 << 20
	mlMaxDecompressedBytes = 2 * mlMaxPushStateBytes
	// headBytes is how much of a decompressed message the check keeps:
	// more than the header of any message.
	headBytes = 4 << 10
)

// mlHandle decodes what memberlist encodes; a handle caches the types it
// decoded and is safe for concurrent use.
var mlHandle = &codec.MsgpackHandle{}

// mlPushNodeState mirrors memberlist's pushNodeState, for its size: what a
// push-pull's header makes memberlist allocate per declared node.
type mlPushNodeState struct {
	Name        string
	Addr        []byte
	Port        uint16
	Meta        []byte
	Incarnation uint32
	State       int
	Vsn         []uint8
}

// mlCompress, mlPushPullHeader and mlUserMsgHeader mirror memberlist's
// compress, pushPullHeader and userMsgHeader (msgpack maps keyed by the
// field names).
type mlCompress struct {
	Algo int
	Buf  []byte
}

type mlPushPullHeader struct {
	Nodes        int
	UserStateLen int
	Join         bool
}

type mlUserMsgHeader struct {
	UserMsgLen int
}

// errStreamInvalid ends the check of a stream memberlist will refuse
// anyway (bad framing, a key that does not decrypt it): the check hands
// memberlist what it read, and memberlist refuses it with its own error.
var errStreamInvalid = errors.New("stream memberlist refuses")

// check reads the head of the stream (see the top of this file), keeps
// what it read to hand memberlist first, and reserves what the stream will
// make memberlist hold. It fails with errStreamBytes when that does not
// fit the guard's bound.
func (c *guardedConn) check() error {
	var head bytes.Buffer
	r := io.TeeReader(countingReader{c}, &head)
	err := c.checkHead(r, &head)
	c.replay = head.Bytes()
	if errors.Is(err, errStreamBytes) {
		return err
	}
	return nil
}

func (c *guardedConn) checkHead(r io.Reader, head *bytes.Buffer) error {
	b, err := readByte(r)
	if err != nil {
		return errStreamInvalid
	}
	label := c.g.label
	if b == mlHasLabelMsg {
		n, err := readByte(r)
		if err != nil {
			return errStreamInvalid
		}
		l := make([]byte, n)
		if _, err := io.ReadFull(r, l); err != nil {
			return errStreamInvalid
		}
		label = string(l)
		if b, err = readByte(r); err != nil {
			return errStreamInvalid
		}
	}
	keys := c.g.keys()
	switch {
	case b == mlEncryptMsg && len(keys) > 0:
		return c.checkEncrypted(r, head, keys, label)
	case b == mlEncryptMsg || len(keys) > 0:
		// Encrypted to an insecure mesh, or plain to an encrypted one:
		// memberlist refuses it after this byte.
		return errStreamInvalid
	default:
		// An insecure mesh: the message follows unframed.
		return c.checkMessage(b, r, true)
	}
}

// checkEncrypted reads the encrypted frame whole, its declared length
// reserved first, decrypts it, and checks the message inside.
func (c *guardedConn) checkEncrypted(r io.Reader, head *bytes.Buffer, keys [][]byte, label string) error {
	var l [4]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return errStreamInvalid
	}
	n := binary.BigEndian.Uint32(l[:])
	if n > mlMaxPushStateBytes {
		return errStreamInvalid
	}
	if !c.reserveReads(int64(n)) {
		return errStreamBytes
	}
	start := head.Len()
	if _, err := io.CopyN(io.Discard, r, int64(n)); err != nil {
		return errStreamInvalid
	}
	frame := head.Bytes()
	aad := append(append([]byte{mlEncryptMsg}, l[:]...), label...)
	plain, err := decryptFrame(keys, frame[start:], aad)
	if err != nil || len(plain) == 0 {
		return errStreamInvalid
	}
	// memberlist holds the decrypted copy beside the frame.
	if !c.reserveExtra(int64(len(plain))) {
		return errStreamBytes
	}
	return c.checkMessage(plain[0], bytes.NewReader(plain[1:]), false)
}

// checkMessage checks a message of type t whose body r holds: a
// compressed one is counted at its expanded size and the message inside
// checked; the header of a push-pull or a user message is decoded and what
// it makes memberlist allocate reserved. unframed: r is the stream itself,
// so a declared length is not known to be there.
func (c *guardedConn) checkMessage(t byte, r io.Reader, unframed bool) error {
	if t == mlCompressMsg {
		var cm mlCompress
		if err := codec.NewDecoder(r, mlHandle).Decode(&cm); err != nil || cm.Algo != mlLZWAlgo {
			return errStreamInvalid
		}
		lz := lzw.NewReader(bytes.NewReader(cm.Buf), lzw.LSB, mlLZWLitWidth)
		defer lz.Close()
		first := make([]byte, headBytes)
		k, err := io.ReadFull(lz, first)
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			return errStreamInvalid
		}
		size := int64(k)
		if k == headBytes {
			// Count the rest, no further than memberlist's limit or what
			// the bound has left.
			limit := min(mlMaxDecompressedBytes, c.g.left()) + 1
			rest, err := io.Copy(io.Discard, io.LimitReader(lz, limit))
			if err != nil {
				return errStreamInvalid
			}
			size += rest
			if size > mlMaxDecompressedBytes {
				// memberlist expands it to its limit before refusing.
				return errStreamBytes
			}
		}
		if !c.reserveExtra(size) {
			return errStreamBytes
		}
		if k == 0 {
			return errStreamInvalid
		}
		return c.checkHeader(first[0], bytes.NewReader(first[1:k]), size-1, false)
	}
	if unframed {
		return c.checkHeader(t, r, 0, true)
	}
	br, ok := r.(*bytes.Reader)
	if !ok {
		return errStreamInvalid
	}
	return c.checkHeader(t, br, int64(br.Len()), false)
}

// checkHeader decodes the header of a push-pull or a user message from r,
// whose body is at least carried bytes long (unless unframed), and
// reserves what memberlist allocates for it: the push-pull's node states,
// and a declared length past what is carried.
func (c *guardedConn) checkHeader(t byte, r io.Reader, carried int64, unframed bool) error {
	// A header is a small map: a stream that sends more before it ends
	// one is not a message memberlist accepts.
	dec := codec.NewDecoder(io.LimitReader(r, headBytes), mlHandle)
	declared := func(n int64) int64 {
		if unframed || n > carried {
			return n
		}
		return 0
	}
	var need int64
	switch t {
	case mlPushPullMsg:
		var h mlPushPullHeader
		if err := dec.Decode(&h); err != nil {
			return errStreamInvalid
		}
		if h.Nodes < 0 || h.Nodes > mlMaxPushStateNodes || h.UserStateLen < 0 || h.UserStateLen > mlMaxPushStateBytes {
			return errStreamInvalid // refused before anything is allocated
		}
		need = int64(h.Nodes)*int64(unsafe.Sizeof(mlPushNodeState{})) + declared(int64(h.UserStateLen))
	case mlUserMsg:
		var h mlUserMsgHeader
		if err := dec.Decode(&h); err != nil {
			return errStreamInvalid
		}
		if h.UserMsgLen < 0 || h.UserMsgLen > mlMaxUserMsgBytes {
			return errStreamInvalid
		}
		need = declared(int64(h.UserMsgLen))
	default:
		return nil
	}
	if !c.reserveExtra(need) {
		return errStreamBytes
	}
	return nil
}

// decryptFrame decrypts an encrypted frame as memberlist does (security.go
// decryptPayload): [version][nonce][AES-GCM ciphertext and tag], version 0
// PKCS#7-padded; aad is the frame's type and length and the stream label.
func decryptFrame(keys [][]byte, msg, aad []byte) ([]byte, error) {
	if len(msg) < 1+mlNonceSize+16 || msg[0] > mlMaxEncryptVsn {
		return nil, errStreamInvalid
	}
	nonce, sealed := msg[1:1+mlNonceSize], msg[1+mlNonceSize:]
	for _, key := range keys {
		block, err := aes.NewCipher(key)
		if err != nil {
			continue
		}
		gcm, err := cipher.NewGCM(block)
		if err != nil {
			continue
		}
		plain, err := gcm.Open(nil, nonce, sealed, aad)
		if err != nil {
			continue
		}
		if msg[0] == 0 && len(plain) > 0 {
			pad := int(plain[len(plain)-1])
			if pad > len(plain) {
				return nil, errStreamInvalid
			}
			plain = plain[:len(plain)-pad]
		}
		return plain, nil
	}
	return nil, errStreamInvalid
}

// countingReader reads the guarded stream with its reads counted against
// the byte bound.
type countingReader struct{ c *guardedConn }

func (r countingReader) Read(p []byte) (int, error) { return r.c.readCounted(p) }

func readByte(r io.Reader) (byte, error) {
	var b [1]byte
	_, err := io.ReadFull(r, b[:])
	return b[0], err
}
