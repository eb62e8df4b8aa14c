package mesh

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gracewatch/gracewatch/internal/nodename"
	"github.com/gracewatch/gracewatch/proto/gwpb"
	"google.golang.org/protobuf/encoding/protowire"
)

// How metas and direct messages are proven (see keys.go for the keys).
//
// A proof is a trailer: the last field of the encoded meta or envelope,
// number proofField, covering every byte before it. Receivers of any
// schema ignore it as an unknown field; the mesh strips it before it
// decodes. What it must be follows from what the bytes claim:
//
//   - an envelope carrying a StateUpdate or a ControlAck: HMAC-SHA256 under
//     the node key of env.from; only aggregators can check it;
//   - a meta of role aggregator, and an envelope carrying a Control, a
//     Handover or a Forget: an Ed25519 signature of an aggregator. An
//     aggregator's meta proof carries its signing time and is valid for
//     aggregatorProofValidity (re-signed every aggregatorProofRefresh), so
//     a copied meta does not make a lasting aggregator of whoever takes the
//     name after the real one died; a message's sent_ms must be recent, and
//     each signed message is accepted once.
//
// An agent's meta carries no proof: 16 bytes that differ on every node
// would nearly double every push-pull (BENCHMARKS.md, "Node restriction"),
// and what it says is proven otherwise. An aggregator takes a node's state
// from its direct, proven StateUpdates only (the agent sends one to every
// aggregator it sees join, and on every change); the gossiped meta of an
// agent is a claim, marked unproven (Member.Proven false), that a site
// running with allow_unsigned may still use.
//
// Without a proof, a meta or message is refused unless the member runs
// with mesh.allow_unsigned (a rolling deployment of the keys), and even
// then not from a name that has been proven once since this process
// started: a node that signs cannot be impersonated by dropping the proof.

// proofField is the field number of the proof trailer (reserved in
// proto/gracewatch.proto).
const proofField protowire.Number = 2046

const (
	// aggregatorProofValidity is how long an aggregator's meta proof is
	// good after its signing time.
	aggregatorProofValidity = 10 * time.Minute
	// aggregatorProofRefresh is how often an aggregator signs its meta
	// again (well within the validity, so that a slow gossip round never
	// lets a live aggregator's proof expire).
	aggregatorProofRefresh = 2 * time.Minute
	// clockSkew is how far in the future a signing time may be.
	clockSkew = time.Minute
	// messageMaxAge is how old an aggregator's signed message may be.
	messageMaxAge = 5 * time.Minute
	// replayCacheMax bounds the signed messages remembered against replay
	// (only aggregators can add to it, and they send a few per second at
	// most; when full, the oldest is forgotten).
	replayCacheMax = 8192
	// authCheckEvery is how often the mesh re-signs its own aggregator
	// meta when due and expires the proofs of others.
	authCheckEvery = 30 * time.Second
)

const (
	metaContext     = "gracewatch meta v1\x00"
	envelopeContext = "gracewatch envelope v1\x00"
)

// ErrUnproven is wrapped by every refusal of a meta or a message whose
// sender is not proven.
var ErrUnproven = errors.New("sender not proven")

// guard applies the rules above for one Mesh.
type guard struct {
	keys          *Keys
	allowUnsigned bool

	mu     sync.Mutex
	proven map[string]bool    // names proven since start (only real members can be added)
	seen   map[[32]byte]int64 // signed messages accepted: proof hash -> expiry (Unix ms)
	order  [][32]byte         // seen's keys, oldest first
	// verified holds, per aggregator name, the last meta whose signature
	// checked out, so that the same bytes (every push-pull carries them)
	// are not verified again. Only a real aggregator's signature adds an
	// entry, so it holds one per aggregator name.
	verified map[string]verifiedMeta
}

// verifiedMeta is a meta whose aggregator signature checked out.
type verifiedMeta struct {
	raw []byte
	o   openedMeta
}

func newGuard(keys *Keys, allowUnsigned bool) *guard {
	return &guard{keys: keys, allowUnsigned: allowUnsigned, proven: map[string]bool{}, seen: map[[32]byte]int64{},
		verified: map[string]verifiedMeta{}}
}

// appendProof appends the proof trailer to b.
func appendProof(b, proof []byte) []byte {
	b = protowire.AppendTag(b, proofField, protowire.BytesType)
	return protowire.AppendBytes(b, proof)
}

// splitProof returns raw without its proof trailer, and the proof, if
// raw's last field is one.
func splitProof(raw []byte) (body, proof []byte, ok bool) {
	for off := 0; off < len(raw); {
		num, typ, n := protowire.ConsumeTag(raw[off:])
		if n < 0 {
			return raw, nil, false
		}
		v := protowire.ConsumeFieldValue(num, typ, raw[off+n:])
		if v < 0 {
			return raw, nil, false
		}
		if off+n+v == len(raw) && num == proofField && typ == protowire.BytesType {
			p, _ := protowire.ConsumeBytes(raw[off+n:])
			return raw[:off], p, true
		}
		off += n + v
	}
	return raw, nil, false
}

func aggregatorMetaMessage(name string, body []byte, signedMs int64) []byte {
	msg := make([]byte, 0, len(metaContext)+len(name)+1+len(body)+8)
	msg = append(msg, metaContext...)
	msg = append(msg, name...)
	msg = append(msg, 0)
	msg = append(msg, body...)
	return binary.BigEndian.AppendUint64(msg, uint64(signedMs))
}

func envelopeMAC(key, body []byte) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(envelopeContext))
	mac.Write(body)
	return mac.Sum(nil)
}

func envelopeMessage(body []byte) []byte {
	return append([]byte(envelopeContext), body...)
}

// sealMeta appends this member's proof to its encoded meta (body): an
// aggregator's signature, if it has the key (proofSize says how much it
// adds). An agent's meta carries none (see above).
func (g *guard) sealMeta(name string, role gwpb.Role, body []byte, now time.Time) []byte {
	if !g.signsMeta(role) {
		return body
	}
	ms := now.UnixMilli()
	sig := ed25519.Sign(g.keys.signer, aggregatorMetaMessage(name, body, ms))
	proof := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(sig)), uint64(ms))
	return appendProof(body, append(proof, sig...))
}

func (g *guard) signsMeta(role gwpb.Role) bool {
	return role == gwpb.Role_ROLE_AGGREGATOR && g.keys != nil && g.keys.signer != nil
}

// proofSize is the size of the trailer sealMeta appends for role.
func (g *guard) proofSize(role gwpb.Role) int {
	if !g.signsMeta(role) {
		return 0
	}
	return protowire.SizeTag(proofField) + protowire.SizeBytes(8+ed25519.SignatureSize)
}

// openedMeta is a member's meta after openMeta. Its meta is shared (the
// verification cache keeps it): read-only.
type openedMeta struct {
	meta     *gwpb.Meta
	leaving  bool
	proven   bool      // its proof checked out here (aggregators' metas)
	signedAt time.Time // an aggregator's: its signing time
	until    time.Time // an aggregator's: when its proof expires
}

// openMeta decodes and checks a member's meta. An error means: use none of
// it (it wraps ErrUnproven when an aggregator's proof is missing or wrong).
// A meta of another role is returned unproven.
func (g *guard) openMeta(name string, raw []byte, now time.Time) (openedMeta, error) {
	body, proof, signed := splitProof(raw)
	meta, leaving, err := decodeMeta(body)
	if err != nil {
		return openedMeta{}, err
	}
	o := openedMeta{meta: meta, leaving: leaving}
	switch role := knownRole(meta.GetRole()); {
	case role != gwpb.Role_ROLE_AGGREGATOR:
		return o, nil
	case !signed || !g.canCheckAggregators():
		// A proof this member has no key to check (allow_unsigned
		// without the aggregators' keys, during a rollout) counts as
		// none: refusing it would be stricter than refusing nothing.
		if err := g.unsigned(name, "aggregator meta"); err != nil {
			return openedMeta{}, err
		}
		return o, nil
	default:
		g.mu.Lock()
		v, cached := g.verified[name]
		g.mu.Unlock()
		if cached && bytes.Equal(v.raw, raw) {
			if err := fresh(v.o.signedAt, now, aggregatorProofValidity); err != nil {
				return openedMeta{}, fmt.Errorf("%w: aggregator meta %v", ErrUnproven, err)
			}
			return v.o, nil
		}
		if len(proof) != 8+ed25519.SignatureSize {
			return openedMeta{}, fmt.Errorf("%w: aggregator meta proof of %d bytes", ErrUnproven, len(proof))
		}
		ms := int64(binary.BigEndian.Uint64(proof))
		if !g.verifyAggregator(aggregatorMetaMessage(name, body, ms), proof[8:]) {
			return openedMeta{}, fmt.Errorf("%w: aggregator meta signature does not verify with any key of mesh.aggregator_keys_file", ErrUnproven)
		}
		signedAt := time.UnixMilli(ms)
		if err := fresh(signedAt, now, aggregatorProofValidity); err != nil {
			return openedMeta{}, fmt.Errorf("%w: aggregator meta %v", ErrUnproven, err)
		}
		o.proven, o.signedAt, o.until = true, signedAt, signedAt.Add(aggregatorProofValidity)
		g.mu.Lock()
		g.verified[name] = verifiedMeta{raw: bytes.Clone(raw), o: o}
		g.proven[name] = true
		g.mu.Unlock()
		return o, nil
	}
}

// unsigned decides about a meta or a message that carries no proof.
func (g *guard) unsigned(name, what string) error {
	if !g.allowUnsigned {
		return fmt.Errorf("%w: %s without a proof (this member requires one; mesh.allow_unsigned is off)", ErrUnproven, what)
	}
	g.mu.Lock()
	proven := g.proven[name]
	g.mu.Unlock()
	if proven {
		return fmt.Errorf("%w: %s without a proof from %s, which has proven itself before", ErrUnproven, what, nodename.Quote(name))
	}
	return nil
}

func (g *guard) everProven(name string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.proven[name]
}

func (g *guard) markProven(name string) {
	g.mu.Lock()
	g.proven[name] = true
	g.mu.Unlock()
}

func (g *guard) canCheckAggregators() bool { return g.keys != nil && len(g.keys.aggPubs) > 0 }
func (g *guard) canCheckNodes() bool       { return g.keys != nil && len(g.keys.sites) > 0 }

func (g *guard) verifyAggregator(msg, sig []byte) bool {
	if g.keys == nil {
		return false
	}
	for _, pub := range g.keys.aggPubs {
		if ed25519.Verify(pub, msg, sig) {
			return true
		}
	}
	return false
}

// verifyNode checks proof against mac(node key) for the node key of every
// site key.
func (g *guard) verifyNode(node string, mac func(key []byte) []byte, proof []byte) bool {
	for _, site := range g.keys.sites {
		if hmac.Equal(mac(NodeKey(site, node)), proof) {
			return true
		}
	}
	return false
}

func fresh(at, now time.Time, maxAge time.Duration) error {
	switch {
	case at.After(now.Add(clockSkew)):
		return fmt.Errorf("signed at %s, in the future (clock skew over %v?)", at.UTC().Format(time.RFC3339), clockSkew)
	case now.Sub(at) > maxAge:
		return fmt.Errorf("signed at %s, more than %v ago", at.UTC().Format(time.RFC3339), maxAge)
	}
	return nil
}

// sealEnvelope appends this member's proof to an encoded envelope.
func (g *guard) sealEnvelope(body []byte) []byte {
	k := g.keys
	switch {
	case k == nil:
		return body
	case k.signer != nil:
		return appendProof(body, ed25519.Sign(k.signer, envelopeMessage(body)))
	case k.node != nil:
		return appendProof(body, envelopeMAC(k.node, body))
	}
	return body
}

// sealedEnvelopeOverhead bounds what sealEnvelope adds.
const sealedEnvelopeOverhead = 3 + ed25519.SignatureSize

// kindOf says who may send a body: an agent (for itself) or an aggregator.
func kindOf(env *gwpb.Envelope) (agent, aggregator bool) {
	switch env.GetBody().(type) {
	case *gwpb.Envelope_State, *gwpb.Envelope_Ack:
		return true, false
	case *gwpb.Envelope_Control, *gwpb.Envelope_Handover, *gwpb.Envelope_Forget:
		return false, true
	}
	return true, true // a body of a newer schema: either proof will do
}

// openEnvelope decodes and checks a direct message to self. An error
// means: drop it (it wraps ErrUnproven when the proof is missing or wrong).
func (g *guard) openEnvelope(self string, raw []byte, now time.Time) (*gwpb.Envelope, error) {
	body, proof, signed := splitProof(raw)
	env, err := DecodeEnvelope(body)
	if err != nil {
		return nil, err
	}
	from := env.GetFrom()
	if err := nodename.Validate(from); err != nil {
		return nil, fmt.Errorf("sender: %w", err)
	}
	if to := env.GetTo(); to != "" && to != self {
		return nil, fmt.Errorf("addressed to %s, not to this member", nodename.Quote(to))
	}
	byAgent, byAggregator := kindOf(env)
	if env.GetControl() != nil && env.GetTo() != self {
		return nil, errors.New("control not addressed to this member (to is empty)")
	}
	if byAggregator && !byAgent && env.GetSentMs() != 0 {
		if err := fresh(time.UnixMilli(env.GetSentMs()), now, messageMaxAge); err != nil {
			return nil, fmt.Errorf("%w: message %v", ErrUnproven, err)
		}
	}
	checkable := (byAggregator && g.canCheckAggregators()) || (byAgent && g.canCheckNodes())
	if !signed || !checkable {
		// As for metas: a proof no key here can check counts as none.
		if err := g.unsigned(from, "message"); err != nil {
			return nil, err
		}
		return env, nil
	}
	ok := false
	if byAggregator && len(proof) == ed25519.SignatureSize && g.verifyAggregator(envelopeMessage(body), proof) {
		if env.GetSentMs() == 0 {
			return nil, fmt.Errorf("%w: signed message without sent_ms", ErrUnproven)
		}
		if !g.firstSight(proof, env.GetSentMs()+messageMaxAge.Milliseconds(), now) {
			return nil, fmt.Errorf("%w: replay of a signed message already accepted", ErrUnproven)
		}
		ok = true
	}
	if !ok && byAgent && g.keys != nil && len(g.keys.sites) > 0 && len(proof) == sha256.Size &&
		g.verifyNode(from, func(key []byte) []byte { return envelopeMAC(key, body) }, proof) {
		ok = true
	}
	if !ok {
		switch {
		case byAggregator && !byAgent:
			return nil, fmt.Errorf("%w: %s needs an aggregator's signature, and this one does not verify with any key of mesh.aggregator_keys_file", ErrUnproven, bodyName(env))
		case g.keys == nil || len(g.keys.sites) == 0:
			return nil, fmt.Errorf("%w: %s is for aggregators, and this member cannot check a node's proof", ErrUnproven, bodyName(env))
		default:
			return nil, fmt.Errorf("%w: proof does not verify with the node key of %s", ErrUnproven, nodename.Quote(from))
		}
	}
	g.markProven(from)
	return env, nil
}

// firstSight records a signed message's proof until expiryMs and reports
// whether it was new.
func (g *guard) firstSight(proof []byte, expiryMs int64, now time.Time) bool {
	h := sha256.Sum256(proof)
	g.mu.Lock()
	defer g.mu.Unlock()
	nowMs := now.UnixMilli()
	for len(g.order) > 0 && (g.seen[g.order[0]] < nowMs || len(g.order) >= replayCacheMax) {
		delete(g.seen, g.order[0])
		g.order = g.order[1:]
	}
	if _, dup := g.seen[h]; dup {
		return false
	}
	g.seen[h] = expiryMs
	g.order = append(g.order, h)
	return true
}

func bodyName(env *gwpb.Envelope) string {
	switch env.GetBody().(type) {
	case *gwpb.Envelope_State:
		return "a state update"
	case *gwpb.Envelope_Ack:
		return "a control ack"
	case *gwpb.Envelope_Control:
		return "a control"
	case *gwpb.Envelope_Handover:
		return "a handover"
	case *gwpb.Envelope_Forget:
		return "a forget"
	}
	return "a message of a newer schema"
}
