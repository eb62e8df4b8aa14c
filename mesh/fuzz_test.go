package mesh

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gracewatch/gracewatch/proto/gwpb"
	"google.golang.org/protobuf/proto"
)

func seedMetas() []*gwpb.Meta {
	return []*gwpb.Meta{
		{},
		{Schema: 1, Role: gwpb.Role_ROLE_AGENT, Incarnation: 3, Seq: 1234, State: gwpb.State_STATE_UP, SinceMs: 1_760_000_000_000},
		{Schema: 1, Role: gwpb.Role_ROLE_AGENT, State: gwpb.State_STATE_DOWN, DeadlineMs: -1, Reason: "hung: D state in read(2) on /scratch é€𝄞"},
		{Role: 99, State: -3, Reason: strings.Repeat("ü", 600)},
	}
}

// Arbitrary bytes never panic the decoder; whatever decodes re-encodes
// within MetaLimit to the same message.
func FuzzDecodeMeta(f *testing.F) {
	for _, m := range seedMetas() {
		b, _ := EncodeMeta(m)
		f.Add(b)
		f.Add(appendLeaving(b))
	}
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMeta(b)
		if err != nil {
			return
		}
		out, err := EncodeMeta(m)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if len(out) > MetaLimit {
			t.Fatalf("re-encoded to %d bytes", len(out))
		}
		again, err := DecodeMeta(out)
		if err != nil {
			t.Fatalf("decode re-encoded: %v", err)
		}
		if !proto.Equal(m, again) {
			t.Fatalf("round trip changed %v into %v", m, again)
		}
	})
}

// Any field values and any reason encode within MetaLimit, decode back to
// the same fields, and the reason comes back whole or cut with the marker,
// always valid UTF-8.
func FuzzEncodeMeta(f *testing.F) {
	for _, m := range seedMetas() {
		f.Add(m.Schema, int32(m.Role), m.Incarnation, m.Seq, int32(m.State), m.FreeAtMs, m.DeadlineMs, m.SinceMs, m.Reason)
	}
	f.Add(uint32(1<<32-1), int32(-1<<31), uint64(1<<64-1), uint64(1<<64-1), int32(-1), int64(-1<<63), int64(-1<<63), int64(-1<<63),
		strings.Repeat("\xff€", 300))
	f.Fuzz(func(t *testing.T, schema uint32, role int32, inc, seq uint64, state int32, free, deadline, since int64, reason string) {
		in := &gwpb.Meta{Schema: schema, Role: gwpb.Role(role), Incarnation: inc, Seq: seq, State: gwpb.State(state),
			FreeAtMs: free, DeadlineMs: deadline, SinceMs: since, Reason: reason}
		b, err := EncodeMeta(in)
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		if len(b) > MetaLimit {
			t.Fatalf("%d bytes", len(b))
		}
		if in.Reason != reason {
			t.Fatal("EncodeMeta modified its argument")
		}
		out, err := DecodeMeta(b)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		r := out.GetReason()
		if !utf8.ValidString(r) {
			t.Fatalf("reason %q is not valid UTF-8", r)
		}
		clean := strings.ToValidUTF8(reason, "\uFFFD")
		if r != clean {
			kept, cut := strings.CutSuffix(r, TruncatedMarker)
			if !cut || !strings.HasPrefix(clean, kept) || len(kept) >= len(clean) {
				t.Fatalf("reason %q is neither %q nor a cut of it", r, clean)
			}
		}
		out.Reason = ""
		in.Reason = ""
		if !proto.Equal(in, out) {
			t.Fatalf("fields changed: %v -> %v", in, out)
		}
	})
}

// Arbitrary bytes never panic the envelope decoder; whatever decodes
// re-encodes to the same message.
func FuzzDecodeEnvelope(f *testing.F) {
	for _, env := range []*gwpb.Envelope{
		{Schema: 1, From: "node1", Body: &gwpb.Envelope_State{State: &gwpb.StateUpdate{
			Meta: &gwpb.Meta{Seq: 1}, Reason: "r", Teardowns: []*gwpb.Teardown{{Job: "f1", DeadlineMs: 5}},
			Reports: []*gwpb.Report{{Job: "f1", DetailJson: []byte(`{"a":1}`)}}}}},
		{Schema: 1, From: "agg-1", Body: &gwpb.Envelope_Control{Control: &gwpb.Control{Id: "1", Action: gwpb.Action_ACTION_DRAIN}}},
		{Schema: 2, From: "node1", Body: &gwpb.Envelope_Ack{Ack: &gwpb.ControlAck{Id: "1", Ok: true, Meta: &gwpb.Meta{}}}},
	} {
		b, _ := EncodeEnvelope(env)
		f.Add(b)
	}
	f.Add([]byte{0x12, 0x05, 'n', 'o', 'd', 'e', '2', 0x52, 0x40, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = claimedSender(b)
		env, err := DecodeEnvelope(b)
		if err != nil {
			return
		}
		out, err := EncodeEnvelope(env)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		again, err := DecodeEnvelope(out)
		if len(out) == 0 && err != nil {
			return // an envelope of defaults encodes to nothing
		}
		if err != nil {
			t.Fatalf("decode re-encoded: %v", err)
		}
		if !proto.Equal(env, again) {
			t.Fatalf("round trip changed %v into %v", env, again)
		}
	})
}

// Arbitrary bytes as a direct message never panic the checks, and nothing
// is accepted without a valid proof: a guard that requires proofs accepts
// only what a holder of the keys sealed (the seeds), whatever the fuzzer
// does to them.
func FuzzOpenEnvelope(f *testing.F) {
	aggK := testKeys(f, "agg-1", gwpb.Role_ROLE_AGGREGATOR)
	nodeK := testKeys(f, "node1", gwpb.Role_ROLE_AGENT)
	now := time.UnixMilli(1_800_000_000_000)
	up := &gwpb.Envelope{Schema: 1, From: "node1", SentMs: now.UnixMilli(), Body: &gwpb.Envelope_State{State: &gwpb.StateUpdate{Meta: &gwpb.Meta{Seq: 3}}}}
	ctrl := &gwpb.Envelope{Schema: 1, From: "agg-1", To: "node1", SentMs: now.UnixMilli(), Body: &gwpb.Envelope_Control{Control: &gwpb.Control{Id: "x"}}}
	for _, c := range []struct {
		env *gwpb.Envelope
		k   *Keys
	}{{up, nodeK}, {ctrl, aggK}, {up, nil}} {
		b, _ := EncodeEnvelope(c.env)
		f.Add(newGuard(c.k, false).sealEnvelope(b))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sealedUp := newGuard(nodeK, false).sealEnvelope(mustEnvelope(t, up))
		sealedCtrl := newGuard(aggK, false).sealEnvelope(mustEnvelope(t, ctrl))
		if env, err := newGuard(aggK, false).openEnvelope("agg-1", b, now); err == nil && string(b) != string(sealedUp) {
			t.Fatalf("aggregator accepted bytes no node sealed: %v", env)
		}
		if env, err := newGuard(nodeK, false).openEnvelope("node1", b, now); err == nil && string(b) != string(sealedCtrl) {
			t.Fatalf("agent accepted bytes no aggregator sealed: %v", env)
		}
		newGuard(aggK, true).openEnvelope("agg-1", b, now) // allow_unsigned: must not panic
	})
}

// Arbitrary bytes as a member's meta never panic the checks, and an
// aggregator role is never granted without a valid signature.
func FuzzOpenMeta(f *testing.F) {
	aggK := testKeys(f, "agg-1", gwpb.Role_ROLE_AGGREGATOR)
	now := time.UnixMilli(1_800_000_000_000)
	body, _ := EncodeMeta(&gwpb.Meta{Schema: 1, Role: gwpb.Role_ROLE_AGGREGATOR})
	signed := newGuard(aggK, false).sealMeta("agg-1", gwpb.Role_ROLE_AGGREGATOR, body, now)
	f.Add(signed)
	f.Add(body)
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := newGuard(aggK, false).openMeta("agg-1", b, now)
		if err == nil && knownRole(o.meta.GetRole()) == gwpb.Role_ROLE_AGGREGATOR {
			if !o.proven {
				t.Fatal("aggregator role without a proof")
			}
			if _, p, ok := splitProof(b); !ok || string(p) != string(signed[len(signed)-len(p):]) {
				t.Fatalf("aggregator role granted to bytes agg-1 did not sign: %x", b)
			}
		}
	})
}

func mustEnvelope(t *testing.T, env *gwpb.Envelope) []byte {
	b, err := EncodeEnvelope(env)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
