package mesh

// The packet check: a gossip packet is at most 64 KiB, but memberlist
// (v0.7.0, net.go ingestPacket, handleCommand) expands a compressed message
// inside it up to 40 MB, a compressed message inside that again, and every
// compressed part of a compound message: a packet of 64 KiB could make it
// expand hundreds of MB, one packet after the other on its one packet
// goroutine, and queue the user messages they hold for its handler. Its
// own packets never expand past the UDP buffer they were made to fit.
//
// So the guard reads every packet before memberlist does: the label
// header, the decryption with the mesh's keys (AES-GCM, the label
// authenticated, as memberlist does), a checksum header, and every
// compressed and compound message inside it, recursively; a packet whose
// compressed messages expand to more than maxPacketExpanded in all is
// dropped (refusedPacketExpansion). The rest is handed to memberlist as it
// came, and memberlist refuses what it refuses.

import (
	"bytes"
	"compress/lzw"
	"encoding/binary"
	"io"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/memberlist"
)

const (
	mlCompoundMsg = 7
	mlHasCrcMsg   = 12
	// maxPacketExpanded bounds what the compressed messages of one packet
	// expand to, in all: the largest UDP payload. memberlist compresses a
	// packet it made to fit its UDP buffer (1,400 bytes by default).
	maxPacketExpanded = 64 << 10
	// maxPacketDepth bounds the nesting of compressed and compound
	// messages the check follows; deeper is dropped.
	maxPacketDepth = 8
)

// forwardPackets hands the packets of the wrapped transport on to
// memberlist, those whose compressed messages expand past
// maxPacketExpanded dropped.
func (g *streamGuard) forwardPackets() {
	defer g.wg.Done()
	in := g.NodeAwareTransport.PacketCh()
	for {
		var p *memberlist.Packet
		select {
		case <-g.done:
			return
		case p = <-in:
		}
		if !packetFits(p.Buf, g.label, g.keys()) {
			if g.onRefuse != nil {
				g.onRefuse(peerIP(p.From), refusedPacketExpansion)
			}
			continue
		}
		select {
		case g.packets <- p:
		case <-g.done:
			return
		}
	}
}

// PacketCh implements memberlist.Transport.
func (g *streamGuard) PacketCh() <-chan *memberlist.Packet { return g.packets }

// packetFits reports whether the compressed messages of packet b, sent to
// a mesh of label and keys (none: insecure), expand to at most
// maxPacketExpanded in all. A packet memberlist cannot read fits: memberlist
// drops it with its own error.
func packetFits(b []byte, label string, keys [][]byte) bool {
	if len(b) > 0 && b[0] == mlHasLabelMsg {
		if len(b) < 2 || len(b) < 2+int(b[1]) {
			return true
		}
		label, b = string(b[2:2+int(b[1])]), b[2+int(b[1]):]
	}
	if len(keys) > 0 {
		plain, err := decryptFrame(keys, b, []byte(label))
		if err != nil {
			return true
		}
		b = plain
	}
	if len(b) >= 5 && b[0] == mlHasCrcMsg {
		b = b[5:]
	}
	budget := maxPacketExpanded
	return expandsWithin(b, &budget, 0)
}

// expandsWithin walks message b, taking what its compressed messages
// expand to from budget; false once the budget or maxPacketDepth is
// passed.
func expandsWithin(b []byte, budget *int, depth int) bool {
	if len(b) == 0 {
		return true
	}
	if depth > maxPacketDepth {
		return false
	}
	switch b[0] {
	case mlCompressMsg:
		var cm mlCompress
		if err := codec.NewDecoderBytes(b[1:], mlHandle).Decode(&cm); err != nil || cm.Algo != mlLZWAlgo {
			return true
		}
		lz := lzw.NewReader(bytes.NewReader(cm.Buf), lzw.LSB, mlLZWLitWidth)
		defer lz.Close()
		var out bytes.Buffer
		n, _ := io.Copy(&out, io.LimitReader(lz, int64(*budget)+1))
		if *budget -= int(n); *budget < 0 {
			return false
		}
		return expandsWithin(out.Bytes(), budget, depth+1)
	case mlCompoundMsg:
		if len(b) < 2 {
			return true
		}
		parts, rest := int(b[1]), b[2:]
		if len(rest) < 2*parts {
			return true
		}
		lengths, rest := rest[:2*parts], rest[2*parts:]
		for i := range parts {
			l := int(binary.BigEndian.Uint16(lengths[2*i:]))
			if len(rest) < l {
				return true // memberlist drops the truncated parts
			}
			if !expandsWithin(rest[:l], budget, depth+1) {
				return false
			}
			rest = rest[l:]
		}
		return true
	default:
		return true
	}
}
