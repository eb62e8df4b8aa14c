package mesh

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/gracewatch/gracewatch/proto/gwpb"
	"github.com/hashicorp/memberlist"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// MetaLimit is memberlist's hard limit on a member's meta (NodeMeta).
const MetaLimit = memberlist.MetaMaxSize

// EnvelopeLimit bounds an encoded Envelope, both ways: EncodeEnvelope refuses
// to build what DecodeEnvelope would refuse to read.
const EnvelopeLimit = 4 << 20

// TruncatedMarker ends a Reason that EncodeMeta cut to fit MetaLimit.
const TruncatedMarker = " …[truncated]"

// ErrTooLarge is returned when an encoded message exceeds its limit.
var ErrTooLarge = errors.New("too large")

// leavingField is a field number, unknown to the schema, that the mesh
// appends to its own meta while it leaves (see Mesh.Leave): memberlist does
// not tell its event delegate whether a member left or failed, so the
// leaving member says so itself. Receivers of any schema ignore unknown
// fields; proto/gracewatch.proto must keep the number reserved.
const leavingField protowire.Number = 2047

var deterministic = proto.MarshalOptions{Deterministic: true}

// EncodeMeta encodes meta deterministically (the same meta always gives the
// same bytes, so memberlist sees no change where there is none). An invalid
// UTF-8 Reason has its bad bytes replaced by U+FFFD. If the result exceeds
// MetaLimit, the Reason is cut at a character boundary and ends with
// TruncatedMarker, so the result always fits; unknown fields (from a newer
// schema) are dropped only if they alone do not fit. meta is not modified.
func EncodeMeta(meta *gwpb.Meta) ([]byte, error) {
	return encodeMeta(meta, MetaLimit)
}

func encodeMeta(meta *gwpb.Meta, limit int) ([]byte, error) {
	if meta == nil {
		return nil, errors.New("encode meta: nil meta")
	}
	m := meta
	if !utf8.ValidString(m.GetReason()) {
		m = proto.CloneOf(meta)
		m.Reason = strings.ToValidUTF8(m.Reason, "\uFFFD")
	}
	b, err := deterministic.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode meta: %w", err)
	}
	if len(b) <= limit {
		return b, nil
	}
	if m == meta {
		m = proto.CloneOf(meta)
	}
	reason := m.Reason
	m.Reason = ""
	avail := limit - deterministic.Size(m)
	if avail < 0 && len(m.ProtoReflect().GetUnknown()) > 0 {
		// Only fields of a newer schema can make it this large.
		m.ProtoReflect().SetUnknown(nil)
		m.Reason = reason
		return encodeMeta(m, limit)
	}
	// The reason field costs its tag (1 byte), its length and its bytes.
	n := avail - 1
	for n > 0 && 1+protowire.SizeVarint(uint64(n))+n > avail {
		n--
	}
	if n >= len(TruncatedMarker) {
		cut := min(n-len(TruncatedMarker), len(reason))
		for cut > 0 && cut < len(reason) && !utf8.RuneStart(reason[cut]) {
			cut--
		}
		m.Reason = reason[:cut] + TruncatedMarker
	}
	b, err = deterministic.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode meta: %w", err)
	}
	if len(b) > limit {
		return nil, fmt.Errorf("encode meta: %d bytes without reason, limit %d: %w", len(b), limit, ErrTooLarge)
	}
	return b, nil
}

// DecodeMeta decodes a member's meta. Fields and enum values of a newer
// schema are kept as they are (unknown fields in the message's unknown set,
// unknown enum values as their numbers); a receiver treats an unknown enum
// value as UNSPECIFIED. Input over MetaLimit is refused: memberlist never
// delivers it.
func DecodeMeta(b []byte) (*gwpb.Meta, error) {
	m, _, err := decodeMeta(b)
	return m, err
}

// decodeMeta is DecodeMeta that also reports (and removes) the leaving mark.
func decodeMeta(b []byte) (*gwpb.Meta, bool, error) {
	if len(b) > MetaLimit {
		return nil, false, fmt.Errorf("decode meta: %d bytes, limit %d: %w", len(b), MetaLimit, ErrTooLarge)
	}
	m := new(gwpb.Meta)
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, false, fmt.Errorf("decode meta (%d bytes): %w", len(b), err)
	}
	return m, stripLeaving(m), nil
}

// appendLeaving marks an encoded meta as leaving.
func appendLeaving(b []byte) []byte {
	b = protowire.AppendTag(b, leavingField, protowire.VarintType)
	return protowire.AppendVarint(b, 1)
}

// hasLeavingMark reports whether an encoded meta carries the leaving mark,
// without decoding it.
func hasLeavingMark(b []byte) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		if num == leavingField && typ == protowire.VarintType {
			return true
		}
		n2 := protowire.ConsumeFieldValue(num, typ, b[n:])
		if n2 < 0 {
			return false
		}
		b = b[n+n2:]
	}
	return false
}

// stripLeaving removes the leaving mark from m's unknown fields and reports
// whether it was there.
func stripLeaving(m *gwpb.Meta) bool {
	r := m.ProtoReflect()
	unk := r.GetUnknown()
	if len(unk) == 0 {
		return false
	}
	var kept []byte
	found := false
	for rest := unk; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return false // cannot happen: the unmarshaller checked it
		}
		v := protowire.ConsumeFieldValue(num, typ, rest[n:])
		if v < 0 {
			return false
		}
		if num == leavingField && typ == protowire.VarintType {
			found = true
		} else {
			kept = append(kept, rest[:n+v]...)
		}
		rest = rest[n+v:]
	}
	if found {
		r.SetUnknown(kept)
	}
	return found
}

// EncodeEnvelope encodes env. It refuses an envelope over EnvelopeLimit.
func EncodeEnvelope(env *gwpb.Envelope) ([]byte, error) {
	if env == nil {
		return nil, errors.New("encode envelope: nil envelope")
	}
	b, err := deterministic.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("encode envelope: %w", err)
	}
	if len(b) > EnvelopeLimit {
		return nil, fmt.Errorf("encode envelope: %d bytes, limit %d: %w", len(b), EnvelopeLimit, ErrTooLarge)
	}
	return b, nil
}

// DecodeEnvelope decodes a direct message. Empty input and input over
// EnvelopeLimit are errors. A body of a newer schema decodes as a nil Body
// (the fields stay in the unknown set): receivers must allow for it.
func DecodeEnvelope(b []byte) (*gwpb.Envelope, error) {
	switch {
	case len(b) == 0:
		return nil, errors.New("decode envelope: empty message")
	case len(b) > EnvelopeLimit:
		return nil, fmt.Errorf("decode envelope: %d bytes, limit %d: %w", len(b), EnvelopeLimit, ErrTooLarge)
	}
	env := new(gwpb.Envelope)
	if err := proto.Unmarshal(b, env); err != nil {
		return nil, fmt.Errorf("decode envelope (%d bytes): %w", len(b), err)
	}
	return env, nil
}

// claimedSender reads the from field (2) of an envelope that did not decode,
// as far as the bytes allow, for logging. It returns "" when it cannot.
func claimedSender(b []byte) string {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		if num == 2 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || len(v) > 256 || !utf8.Valid(v) {
				return ""
			}
			return string(v)
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return ""
		}
		b = b[n:]
	}
	return ""
}
