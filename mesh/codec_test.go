package mesh

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gracewatch/gracewatch/proto/gwpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// A healthy node's meta stays within the 64 bytes of the design.
func TestMetaSizeHealthy(t *testing.T) {
	meta := &gwpb.Meta{Schema: gwpb.SchemaVersion, Role: gwpb.Role_ROLE_AGENT, Incarnation: 3, Seq: 1234,
		State: gwpb.State_STATE_UP, SinceMs: time.Now().UnixMilli()}
	b, err := EncodeMeta(meta)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("healthy meta: %d bytes", len(b))
	if len(b) > 64 {
		t.Errorf("healthy meta is %d bytes, want <= 64", len(b))
	}
	// A teardown in progress adds free_at and deadline.
	meta.State, meta.FreeAtMs, meta.DeadlineMs = gwpb.State_STATE_TEARDOWN, meta.SinceMs+90_000, meta.SinceMs+90_000
	b, _ = EncodeMeta(meta)
	t.Logf("teardown meta: %d bytes", len(b))
	if len(b) > 64 {
		t.Errorf("teardown meta is %d bytes, want <= 64", len(b))
	}
	again, _ := EncodeMeta(meta)
	if !bytes.Equal(b, again) {
		t.Error("EncodeMeta is not deterministic")
	}
}

// A long reason is cut to fit, at a character boundary, with the marker.
func TestMetaSizeLongReason(t *testing.T) {
	base := &gwpb.Meta{Schema: gwpb.SchemaVersion, Role: gwpb.Role_ROLE_AGENT, Incarnation: 3, Seq: 1234,
		State: gwpb.State_STATE_DOWN, SinceMs: time.Now().UnixMilli(), DeadlineMs: time.Now().UnixMilli()}
	// Shifting a run of 2-, 3- and 4-byte characters by one byte at a time
	// puts every kind of character boundary (and non-boundary) at the cut.
	for pad := range 8 {
		reason := strings.Repeat("x", pad) + strings.Repeat("é€𝄞ü", 10_000/10)
		meta := proto.CloneOf(base)
		meta.Reason = reason
		b, err := EncodeMeta(meta)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > MetaLimit {
			t.Fatalf("pad %d: %d bytes, limit %d", pad, len(b), MetaLimit)
		}
		got, err := DecodeMeta(b)
		if err != nil {
			t.Fatal(err)
		}
		r := got.GetReason()
		kept, ok := strings.CutSuffix(r, TruncatedMarker)
		if !ok || !utf8.ValidString(r) || !strings.HasPrefix(reason, kept) {
			t.Errorf("pad %d: reason %q: want a valid UTF-8 prefix of the original and the marker", pad, r)
		}
		if len(b) < MetaLimit-3 {
			t.Errorf("pad %d: %d bytes: the cut wastes more than a character", pad, len(b))
		}
		got.Reason = reason
		if !proto.Equal(got, meta) {
			t.Errorf("pad %d: other fields changed: %v", pad, got)
		}
		if meta.Reason != reason {
			t.Error("EncodeMeta modified its argument")
		}
		if pad == 0 {
			t.Logf("10 KB reason: %d bytes encoded, %d bytes of reason kept", len(b), len(kept))
		}
	}
}

func TestEncodeMetaInvalidUTF8(t *testing.T) {
	b, err := EncodeMeta(&gwpb.Meta{Reason: "read of /mnt/\xff\xfe hangs"})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := DecodeMeta(b)
	if got.GetReason() != "read of /mnt/\uFFFD hangs" {
		t.Errorf("reason %q", got.GetReason())
	}
}

// Unknown fields of a newer schema that do not fit are dropped, the known
// ones kept.
func TestEncodeMetaHugeUnknown(t *testing.T) {
	b, _ := EncodeMeta(&gwpb.Meta{Seq: 5, Reason: "r"})
	b = protowire.AppendTag(b, 99, protowire.BytesType)
	b = protowire.AppendBytes(b, make([]byte, 600))
	m := new(gwpb.Meta)
	if err := proto.Unmarshal(b, m); err != nil {
		t.Fatal(err)
	}
	out, err := EncodeMeta(m)
	if err != nil || len(out) > MetaLimit {
		t.Fatalf("EncodeMeta = %d bytes, %v", len(out), err)
	}
	got, _ := DecodeMeta(out)
	if got.GetSeq() != 5 || got.GetReason() != "r" {
		t.Errorf("got %v", got)
	}
}

func TestDecodeMetaErrors(t *testing.T) {
	if _, err := DecodeMeta(make([]byte, MetaLimit+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized: %v", err)
	}
	if _, err := DecodeMeta([]byte{0x4a, 0x10, 'a'}); err == nil || !strings.Contains(err.Error(), "decode meta (3 bytes)") {
		t.Errorf("truncated: %v", err)
	}
	if m, err := DecodeMeta(nil); err != nil || !proto.Equal(m, &gwpb.Meta{}) {
		t.Errorf("empty: %v, %v", m, err)
	}
}

func TestEnvelopeErrors(t *testing.T) {
	if _, err := DecodeEnvelope(nil); err == nil {
		t.Error("empty envelope decoded")
	}
	if _, err := DecodeEnvelope(make([]byte, EnvelopeLimit+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized: %v", err)
	}
	big := &gwpb.Envelope{Body: &gwpb.Envelope_State{State: &gwpb.StateUpdate{
		Reports: []*gwpb.Report{{DetailJson: make([]byte, EnvelopeLimit)}}}}}
	if _, err := EncodeEnvelope(big); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized encode: %v", err)
	}
	if _, err := EncodeEnvelope(nil); err == nil {
		t.Error("nil envelope encoded")
	}
}

// The leaving mark survives truncation and disappears on decoding.
func TestLeavingMark(t *testing.T) {
	m := &Mesh{name: "agg-1", role: gwpb.Role_ROLE_AGGREGATOR, meta: &gwpb.Meta{Role: gwpb.Role_ROLE_AGGREGATOR, Seq: 9, Reason: strings.Repeat("€", 4000)}, leaving: true,
		guard: newGuard(testKeys(t, "agg-1", gwpb.Role_ROLE_AGGREGATOR), false), now: time.Now}
	if err := m.storeMetaLocked(); err != nil {
		t.Fatal(err)
	}
	b := *m.metaBytes.Load()
	if len(b) > MetaLimit {
		t.Fatalf("%d bytes", len(b))
	}
	// Signed: an agent proves it, and the mark is under the proof.
	agent := newGuard(testKeys(t, "n1", gwpb.Role_ROLE_AGENT), false)
	o, err := agent.openMeta("agg-1", b, time.Now())
	if err != nil || !o.proven || !o.leaving {
		t.Fatalf("openMeta: %+v, %v", o, err)
	}
	got := o.meta
	if len(got.ProtoReflect().GetUnknown()) != 0 || got.GetSeq() != 9 || !strings.HasSuffix(got.GetReason(), TruncatedMarker) {
		t.Errorf("decoded %v", got)
	}
	if b := (delegate{m}).NodeMeta(MetaLimit); !bytes.Equal(b, *m.metaBytes.Load()) {
		t.Error("NodeMeta does not return the stored meta")
	}
	if small := (delegate{m}).NodeMeta(100); len(small) > 100 {
		t.Errorf("NodeMeta(100) = %d bytes", len(small))
	}
}

// A message of schema N+1 (a field this build does not know) decodes: the
// known fields are kept, the unknown one too (not lost on re-encoding).
func TestSchemaNewerMessage(t *testing.T) {
	future := func(b []byte) []byte {
		b = protowire.AppendTag(b, 99, protowire.BytesType)
		return protowire.AppendBytes(b, []byte("a field of schema N+1"))
	}
	meta := &gwpb.Meta{Schema: 1, Role: gwpb.Role_ROLE_AGENT, Incarnation: 2, Seq: 3, State: gwpb.State_STATE_DOWN, Reason: "hung"}
	b, _ := EncodeMeta(meta)
	got, err := DecodeMeta(future(b))
	if err != nil {
		t.Fatal(err)
	}
	if got.GetSeq() != 3 || got.GetState() != gwpb.State_STATE_DOWN || got.GetReason() != "hung" || got.GetRole() != gwpb.Role_ROLE_AGENT {
		t.Errorf("known fields lost: %v", got)
	}
	if re, _ := EncodeMeta(got); !bytes.Contains(re, []byte("a field of schema N+1")) {
		t.Error("the unknown field is lost on re-encoding")
	}

	env := &gwpb.Envelope{Schema: 1, From: "node1", Body: &gwpb.Envelope_Control{Control: &gwpb.Control{Id: "x"}}}
	eb, _ := EncodeEnvelope(env)
	genv, err := DecodeEnvelope(future(eb))
	if err != nil || genv.GetFrom() != "node1" || genv.GetControl().GetId() != "x" {
		t.Errorf("envelope with a new field: %v, %v", genv, err)
	}
	// A body type of schema N+1 (a new oneof member, field 20).
	nb, _ := EncodeEnvelope(&gwpb.Envelope{Schema: 2, From: "node1"})
	nb = protowire.AppendTag(nb, 20, protowire.BytesType)
	nb = protowire.AppendBytes(nb, []byte{0x08, 0x01})
	genv, err = DecodeEnvelope(nb)
	if err != nil || genv.GetBody() != nil || genv.GetFrom() != "node1" || genv.GetSchema() != 2 {
		t.Errorf("envelope with a new body: %v, %v", genv, err)
	}
}

// oldMeta is Meta as an older schema knew it: fields 1 to 5 only.
func oldMeta(t *testing.T) *dynamicpb.Message {
	t.Helper()
	str := func(s string) *string { return &s }
	num := func(n int32) *int32 { return &n }
	field := func(name string, n int32, typ descriptorpb.FieldDescriptorProto_Type) *descriptorpb.FieldDescriptorProto {
		return &descriptorpb.FieldDescriptorProto{Name: str(name), Number: num(n), Type: typ.Enum(),
			Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()}
	}
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name: str("old.proto"), Package: str("gracewatch.old"), Syntax: str("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{Name: str("Meta"), Field: []*descriptorpb.FieldDescriptorProto{
			field("schema", 1, descriptorpb.FieldDescriptorProto_TYPE_UINT32),
			field("role", 2, descriptorpb.FieldDescriptorProto_TYPE_INT32),
			field("incarnation", 3, descriptorpb.FieldDescriptorProto_TYPE_UINT64),
			field("seq", 4, descriptorpb.FieldDescriptorProto_TYPE_UINT64),
			field("state", 5, descriptorpb.FieldDescriptorProto_TYPE_INT32),
		}}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return dynamicpb.NewMessage(fd.Messages().Get(0))
}

// An older reader (schema N-1: a Meta without the later fields) reads this
// build's meta, and this build reads an older writer's.
func TestSchemaOlderPeer(t *testing.T) {
	meta := &gwpb.Meta{Schema: 1, Role: gwpb.Role_ROLE_AGGREGATOR, Incarnation: 4, Seq: 5,
		State: gwpb.State_STATE_TEARDOWN, FreeAtMs: 6, DeadlineMs: 7, SinceMs: 8, Reason: "nine"}
	b, _ := EncodeMeta(meta)
	old := oldMeta(t)
	if err := proto.Unmarshal(b, old); err != nil {
		t.Fatalf("old reader: %v", err)
	}
	f := old.Descriptor().Fields()
	if old.Get(f.ByNumber(4)).Uint() != 5 || old.Get(f.ByNumber(2)).Int() != int64(gwpb.Role_ROLE_AGGREGATOR) ||
		old.Get(f.ByNumber(5)).Int() != int64(gwpb.State_STATE_TEARDOWN) {
		t.Errorf("old reader got %v", old)
	}
	if len(old.GetUnknown()) == 0 {
		t.Error("old reader: the newer fields should sit in the unknown set")
	}

	written := dynamicpb.NewMessage(old.Descriptor())
	written.Set(f.ByNumber(1), protoreflect.ValueOfUint32(1))
	written.Set(f.ByNumber(4), protoreflect.ValueOfUint64(77))
	wb, err := proto.Marshal(written)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeMeta(wb)
	if err != nil || got.GetSeq() != 77 || got.GetSchema() != 1 || got.GetFreeAtMs() != 0 || got.GetReason() != "" {
		t.Errorf("old writer: %v, %v", got, err)
	}
}

// Enum values this build does not know decode as numbers; Member.Role maps
// them to ROLE_UNSPECIFIED.
func TestUnknownEnumValues(t *testing.T) {
	var b []byte
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, 7) // role 7
	b = protowire.AppendTag(b, 5, protowire.VarintType)
	b = protowire.AppendVarint(b, 9) // state 9
	got, err := DecodeMeta(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetRole() != 7 || got.GetState() != 9 {
		t.Errorf("got %v", got)
	}
	if knownRole(got.GetRole()) != gwpb.Role_ROLE_UNSPECIFIED || knownRole(gwpb.Role_ROLE_AGENT) != gwpb.Role_ROLE_AGENT {
		t.Error("knownRole")
	}
	st := &memberState{}
	if _, err := (&Mesh{guard: newGuard(nil, true), now: time.Now}).decodeMemberMeta(st, b, time.Now()); err != nil || st.Role != gwpb.Role_ROLE_UNSPECIFIED || st.Meta.GetRole() != 7 {
		t.Errorf("member: %+v, %v", st.Member, err)
	}
}

// An undecodable meta is logged once per value, and the member kept.
func TestBadMemberMeta(t *testing.T) {
	m := &Mesh{guard: newGuard(nil, true), now: time.Now}
	st := &memberState{}
	bad := []byte{0xff, 0xff}
	if _, err := m.decodeMemberMeta(st, bad, time.Now()); err == nil || st.MetaErr == nil || st.Meta != nil {
		t.Fatalf("first bad meta: %v, %+v", err, st.Member)
	}
	if _, err := m.decodeMemberMeta(st, bad, time.Now()); err != nil || st.MetaErr == nil {
		t.Errorf("same bad meta again: should not be logged again (%v)", err)
	}
	good, _ := EncodeMeta(&gwpb.Meta{Role: gwpb.Role_ROLE_AGENT})
	if _, err := m.decodeMemberMeta(st, good, time.Now()); err != nil || st.MetaErr != nil || st.Role != gwpb.Role_ROLE_AGENT {
		t.Errorf("good meta: %v, %+v", err, st.Member)
	}
	if _, err := m.decodeMemberMeta(st, []byte{0xfe}, time.Now()); err == nil {
		t.Error("a different bad meta should be logged")
	}
}

func TestClaimedSender(t *testing.T) {
	good, _ := EncodeEnvelope(&gwpb.Envelope{Schema: 1, From: "node7"})
	for _, tc := range []struct {
		in   []byte
		want string
	}{
		{good, "node7"},
		{append(append([]byte{}, good...), 0x52, 0x40), "node7"},
		{[]byte{0xff}, ""},
		{nil, ""},
		{[]byte{0x12, 0x02, 0xff, 0xfe}, ""},
	} {
		if got := claimedSender(tc.in); got != tc.want {
			t.Errorf("claimedSender(%x) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
