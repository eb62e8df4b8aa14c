// Package rogue crafts memberlist's own failure-detector messages as a
// member that holds the mesh key can: alive, suspect and dead messages
// about any member, with any incarnation, address and meta. They are
// encoded as memberlist v0.7.0 encodes them (net.go's alive, suspect and
// dead structs, msgpack as util.go's encode writes it, compound messages
// as makeCompoundMessage builds them), sealed with the keyring's primary
// key as security.go's encryption version 1 does (AES-GCM, the label as
// additional data), prefixed with the cluster label (label.go), and sent
// over UDP from a socket of their own: nothing of memberlist's sending code
// is in the way, so tests can repeat the attacks of a compromised node on
// loopback.
package rogue

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// memberlist's message types (net.go).
const (
	suspectMsg  = 3
	aliveMsg    = 4
	deadMsg     = 5
	compoundMsg = 7
	userMsg     = 8
	labelMsg    = 244 // hasLabelMsg
)

// MaxIncarnation is the largest incarnation: a refutation of it wraps to 0.
const MaxIncarnation = ^uint32(0)

// The structs memberlist encodes (net.go); the field names are the wire's.
type alive struct {
	Incarnation uint32
	Node        string
	Addr        []byte
	Port        uint16
	Meta        []byte
	Vsn         []uint8
}

type dead struct {
	Incarnation uint32
	Node        string
	From        string
}

type suspect struct {
	Incarnation uint32
	Node        string
	From        string
}

// vsn is the protocol versions a memberlist of the default configuration
// announces: min 1, max 5, current 2; delegate versions 0.
var vsn = []uint8{1, 5, 2, 0, 0, 0}

// Crafter sends crafted messages into one cluster. Its methods are safe for
// concurrent use.
type Crafter struct {
	label string
	gcm   cipher.AEAD // nil: an unencrypted cluster
	conn  *net.UDPConn
}

// New returns a Crafter for the cluster with label whose keyring's primary
// key is key (nil: the cluster is not encrypted), sending from a UDP socket
// on 127.0.0.1.
func New(label string, key []byte) (*Crafter, error) {
	c := &Crafter{label: label}
	if key != nil {
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, fmt.Errorf("rogue: key: %w", err)
		}
		if c.gcm, err = cipher.NewGCM(block); err != nil {
			return nil, fmt.Errorf("rogue: key: %w", err)
		}
	}
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("rogue: socket: %w", err)
	}
	c.conn = conn
	return c, nil
}

// Close closes the socket.
func (c *Crafter) Close() error { return c.conn.Close() }

// Alive is an alive message about node, reached at addr (IP:port), with
// incarnation inc and meta.
func Alive(node, addr string, inc uint32, meta []byte) []byte {
	ap := netip.MustParseAddrPort(addr)
	ip := ap.Addr().AsSlice()
	return encode(aliveMsg, &alive{Incarnation: inc, Node: node, Addr: ip, Port: ap.Port(), Meta: meta, Vsn: vsn})
}

// Dead is a dead message about node from from (from == node: it left).
func Dead(node, from string, inc uint32) []byte {
	return encode(deadMsg, &dead{Incarnation: inc, Node: node, From: from})
}

// Suspect is a suspect message about node from from.
func Suspect(node, from string, inc uint32) []byte {
	return encode(suspectMsg, &suspect{Incarnation: inc, Node: node, From: from})
}

// User is a user message carrying payload, which the member's delegate
// gets as it is (NotifyMsg). memberlist queues it behind the alive messages
// it has not handled yet (an alive message goes first, whenever it came):
// once a member has handled it, it has handled every alive message that
// came before it.
func User(payload []byte) []byte {
	return append([]byte{userMsg}, payload...)
}

// Compound packs up to 255 messages into one, as memberlist's gossip does.
func Compound(msgs ...[]byte) []byte {
	if len(msgs) > 255 {
		panic("rogue: more than 255 messages in a compound")
	}
	var b bytes.Buffer
	b.WriteByte(compoundMsg)
	b.WriteByte(uint8(len(msgs)))
	for _, m := range msgs {
		binary.Write(&b, binary.BigEndian, uint16(len(m)))
	}
	for _, m := range msgs {
		b.Write(m)
	}
	return b.Bytes()
}

// Send seals msg as a packet of the cluster and sends it over UDP to addr
// (a member's IP:port).
func (c *Crafter) Send(addr string, msg []byte) error {
	pkt, err := c.Seal(msg)
	if err != nil {
		return err
	}
	to, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return fmt.Errorf("rogue: %w", err)
	}
	if _, err := c.conn.WriteToUDP(pkt, to); err != nil {
		return fmt.Errorf("rogue: send to %s: %w", addr, err)
	}
	return nil
}

// Seal returns msg as a packet of the cluster: encrypted with the key (the
// label as additional data), with the label header in front.
func (c *Crafter) Seal(msg []byte) ([]byte, error) {
	body := msg
	if c.gcm != nil {
		nonce := make([]byte, c.gcm.NonceSize())
		if _, err := rand.Read(nonce); err != nil {
			return nil, err
		}
		body = append([]byte{1}, nonce...) // encryption version 1: no padding
		body = c.gcm.Seal(body, nonce, msg, []byte(c.label))
	}
	if c.label == "" {
		return body, nil
	}
	if len(c.label) > 255 {
		return nil, errors.New("rogue: label over 255 bytes")
	}
	return append([]byte{labelMsg, byte(len(c.label))}, append([]byte(c.label), body...)...), nil
}

// encode is memberlist's util.go encode: the type byte, then msgpack.
func encode(typ byte, v any) []byte {
	var b bytes.Buffer
	b.WriteByte(typ)
	h := codec.MsgpackHandle{}
	h.TimeNotBuiltin = true
	if err := codec.NewEncoder(&b, &h).Encode(v); err != nil {
		panic(fmt.Sprintf("rogue: encode: %v", err)) // cannot happen with these structs
	}
	return b.Bytes()
}
