package mesh

// What memberlist tells the mesh: its delegate (meta, direct messages) and
// event delegate (members joining, changing, leaving), the checks of what
// members publish, and the upkeep of aggregators' proofs.

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/gracewatch/gracewatch/internal/nodename"
	"github.com/gracewatch/gracewatch/proto/gwpb"
	"github.com/hashicorp/memberlist"
	"google.golang.org/protobuf/proto"
)

// delegate is memberlist's Delegate.
type delegate struct{ m *Mesh }

// NodeMeta returns the stored encoded meta, never over limit.
func (d delegate) NodeMeta(limit int) []byte {
	b := *d.m.metaBytes.Load()
	if len(b) <= limit {
		return b
	}
	d.m.metaMu.Lock()
	defer d.m.metaMu.Unlock()
	small, err := d.m.encodeOwnMetaLocked(limit)
	if err != nil {
		d.m.log.Error("meta does not fit memberlist's limit", "limit", limit, "err", err)
		return nil
	}
	return small
}

// NotifyMsg decodes a direct message and hands it to the Handler. Its
// size is checked before anything else; buf is not kept (memberlist reuses
// a packet's buffer): what is decoded from it is copied.
func (d delegate) NotifyMsg(buf []byte) {
	b := buf
	var env *gwpb.Envelope
	var err error
	if len(b) > EnvelopeLimit+sealedEnvelopeOverhead {
		err = fmt.Errorf("decode envelope: %d bytes, limit %d: %w", len(b), EnvelopeLimit, ErrTooLarge)
	} else {
		env, err = d.m.guard.openEnvelope(d.m.name, b, d.m.now())
	}
	if err != nil {
		from := claimedSender(b)
		if from == "" {
			from = "unknown"
		}
		if errors.Is(err, ErrUnproven) {
			d.m.dropped[droppedUnproven].Add(1)
		} else {
			d.m.dropped[droppedUndecodable].Add(1)
		}
		if ok, suppressed := d.m.badMsgs.Allow(from, time.Now()); ok {
			msg := "dropped undecodable message"
			if errors.Is(err, ErrUnproven) {
				msg = "refused a message whose sender is not proven"
			}
			d.m.log.Warn(msg, "from", nodename.ForLog(from), "bytes", len(b), "err", err,
				"suppressed", suppressed)
		}
		return
	}
	if _, byAggregator := kindOf(env); byAggregator {
		// Accepted, so signed by an aggregator where this member can
		// check it: a proof of life of one in the book.
		d.m.noteContact(env.GetFrom(), d.m.now())
	}
	if h := d.m.handler; h != nil {
		h.HandleMessage(env.GetFrom(), env)
	}
}

// GetBroadcasts returns nil: user broadcasts are not used.
func (delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState returns nil: the meta carries the state.
func (delegate) LocalState(join bool) []byte { return nil }

// MergeRemoteState does nothing.
func (delegate) MergeRemoteState(buf []byte, join bool) {}

// events is memberlist's EventDelegate. Its methods run with memberlist's
// member lock held.
type events struct{ m *Mesh }

type eventKind int

const (
	eventJoin eventKind = iota
	eventUpdate
	eventLeave
)

func (e events) NotifyJoin(n *memberlist.Node)   { e.m.observe(n, eventJoin) }
func (e events) NotifyUpdate(n *memberlist.Node) { e.m.observe(n, eventUpdate) }
func (e events) NotifyLeave(n *memberlist.Node)  { e.m.observe(n, eventLeave) }

// observe records what memberlist says about n and tells the Handler.
func (m *Mesh) observe(n *memberlist.Node, kind eventKind) {
	now := time.Now()
	if err := nodename.Validate(n.Name); err != nil {
		if ok, suppressed := m.badMsgs.Allow("name:"+n.Name, now); ok {
			addr := net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
			m.log.Warn("ignored a member with an invalid name", "addr", addr, "err", err, "suppressed", suppressed)
		}
		return
	}
	var badMeta error
	left := false
	m.mu.Lock()
	st := m.members[n.Name]
	isNew := st == nil
	if isNew {
		st = &memberState{Member: Member{Name: n.Name}}
		m.members[n.Name] = st
	}
	// Every member hears every other's changes: what did not change is
	// not built again.
	changed := isNew || st.port != n.Port || !st.ip.Equal(n.Addr)
	if changed {
		st.ip, st.port = slices.Clone(n.Addr), n.Port
		st.Addr = net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
	}
	addr := st.Addr
	if isNew || !bytes.Equal(st.raw, n.Meta) {
		oldMeta, oldErr := st.Meta, st.MetaErr
		left, badMeta = m.decodeMemberMeta(st, n.Meta, now)
		changed = changed || !proto.Equal(oldMeta, st.Meta) || (oldErr == nil) != (st.MetaErr == nil)
	}
	prev := st.Status
	status := prev
	switch kind {
	case eventJoin:
		status = StatusAlive
	case eventUpdate:
		if status == "" {
			status = StatusAlive
		}
	case eventLeave:
		status = StatusDead
		// Node.State is not filled in by memberlist v0.7.0; use it if a
		// later version does.
		if n.State == memberlist.StateLeft || st.leaving {
			status = StatusLeft
		}
	}
	if status != st.Status {
		st.Status, st.Since = status, now
		changed = true
	}
	m.bookStatusLocked(n.Name, status, now)
	_, inBook := m.book[n.Name]
	st.Signs = m.guard.everProven(n.Name)
	mem, hidden := st.Member, st.hidden
	m.mu.Unlock()

	if badMeta != nil {
		msg := "undecodable member meta"
		if errors.Is(badMeta, ErrUnproven) {
			msg = "refused a member meta that is not proven"
		}
		if ok, suppressed := m.badMsgs.Allow("meta:"+n.Name, now); ok {
			m.log.Warn(msg, "node", nodename.ForLog(n.Name), "addr", addr, "bytes", len(n.Meta), "err", badMeta, "suppressed", suppressed)
		}
	}
	if left {
		m.log.Info("aggregator left (its leave is signed)", "aggregator", n.Name, "addr", addr)
	}
	if inBook {
		m.upkeepBook(m.now())
	}
	if hidden {
		return
	}
	// Departures and returns matter to an operator; the first sight of
	// each member (thousands when an aggregator starts) does not.
	switch {
	case kind == eventLeave:
		m.memberLine(slog.LevelInfo, mem.Name, "member gone", "node", mem.Name, "addr", addr, "status", string(mem.Status))
	case kind == eventJoin && (prev == StatusDead || prev == StatusLeft):
		m.memberLine(slog.LevelInfo, mem.Name, "member back", "node", mem.Name, "addr", addr, "role", mem.Role.String(), "was", string(prev))
	case kind == eventJoin:
		m.memberLine(slog.LevelDebug, mem.Name, "member joined", "node", mem.Name, "addr", addr, "role", mem.Role.String())
	}
	if changed && m.handler != nil {
		m.handler.MemberChanged(mem)
	}
}

// decodeMemberMeta decodes and checks a member's meta into st. It returns
// the error if it should be logged (once per node and meta value), and
// whether the meta is an aggregator's signed leave that removed it from
// the book. A meta that is not proven leaves st without meta or role; the
// member is hidden unless its name has been proven here before (then it
// shows, with the error, so that an operator sees a node whose key went
// wrong). m.mu is held.
func (m *Mesh) decodeMemberMeta(st *memberState, raw []byte, now time.Time) (left bool, logErr error) {
	st.raw = bytes.Clone(raw)
	st.Meta, st.MetaErr, st.Role, st.leaving, st.proofUntil, st.Proven = nil, nil, gwpb.Role_ROLE_UNSPECIFIED, false, time.Time{}, false
	if len(raw) == 0 {
		return false, nil
	}
	if m.role != gwpb.Role_ROLE_AGGREGATOR && st.Name != m.name && metaRole(raw) == gwpb.Role_ROLE_AGENT {
		// An agent has no use for another agent's meta (a claim that
		// only an aggregator may read, where unproven state is
		// accepted): it is not decoded, only its role read. Every
		// member hears every other's changes: at 1,000 members that was
		// a tenth of each agent's member table and of its garbage.
		st.hidden, st.Role, st.leaving = false, gwpb.Role_ROLE_AGENT, hasLeavingMark(raw)
		return false, nil
	}
	o, err := m.guard.openMeta(st.Name, raw, m.now())
	if err == nil && o.proven && o.meta.GetAddr() != "" && o.meta.GetAddr() != st.Addr {
		err = fmt.Errorf("%w: aggregator meta signed for %s, announced at %s", ErrUnproven, o.meta.GetAddr(), st.Addr)
	}
	if err != nil {
		st.MetaErr = err
		st.hidden = !m.guard.everProven(st.Name) && (errors.Is(err, ErrUnproven) || !m.guard.allowUnsigned)
		if bytes.Equal(st.badMeta, raw) {
			return false, nil
		}
		st.badMeta = st.raw
		return false, err
	}
	st.hidden = false
	st.Meta, st.Role, st.leaving, st.proofUntil, st.Proven = o.meta, knownRole(o.meta.GetRole()), o.leaving, o.until, o.proven
	if o.proven && st.Role == gwpb.Role_ROLE_AGGREGATOR {
		left = m.bookProvenLocked(st, o, raw, now)
	}
	return left, nil
}

// authLoop signs this aggregator's meta again when its proof is due and
// withdraws the role of aggregators whose proof has expired, every
// interval, until stop.
func (m *Mesh) authLoop(every time.Duration) {
	defer close(m.authDone)
	t := time.NewTicker(every)
	defer t.Stop()
	signed := m.now()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		now := m.now()
		if m.role == gwpb.Role_ROLE_AGGREGATOR && m.guard.keys.signer != nil && now.Sub(signed) >= aggregatorProofRefresh {
			if m.resign() {
				signed = now
			}
		}
		m.expireProofs(now)
		m.resolveSeeds()
		m.upkeepBook(now)
	}
}

// resign stores this member's meta again (a new signing time) and gossips
// it; it reports whether it did.
func (m *Mesh) resign() bool {
	if m.closed(true) {
		return false
	}
	m.metaMu.Lock()
	err := m.storeMetaLocked()
	m.metaMu.Unlock()
	if err != nil {
		m.log.Error("cannot sign the meta again", "err", err)
		return false
	}
	if err := m.ml.UpdateNode(metaUpdateTimeout); err != nil {
		m.log.Debug("re-signed meta not gossiped in time (push-pull carries it)", "err", err)
	}
	return true
}

// expireProofs withdraws the role of every aggregator whose meta proof
// expired before now, and tells the Handler.
func (m *Mesh) expireProofs(now time.Time) {
	var changed []Member
	m.mu.Lock()
	for name, st := range m.members {
		if name == m.name || st.proofUntil.IsZero() || now.Before(st.proofUntil) {
			continue
		}
		st.MetaErr = fmt.Errorf("%w: aggregator meta proof expired at %s (not signed again)", ErrUnproven, st.proofUntil.UTC().Format(time.RFC3339))
		st.Meta, st.Role, st.proofUntil, st.Proven = nil, gwpb.Role_ROLE_UNSPECIFIED, time.Time{}, false
		changed = append(changed, st.Member)
	}
	m.mu.Unlock()
	for _, mem := range changed {
		m.log.Warn("aggregator role withdrawn: its proof expired", "node", mem.Name, "err", mem.MetaErr)
		if m.handler != nil {
			m.handler.MemberChanged(mem)
		}
	}
}
