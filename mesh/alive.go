package mesh

// What memberlist lets a member refuse of the failure detector's messages
// (memberlist v0.7.0): its AliveDelegate sees every alive message, from a
// packet or a push-pull, before memberlist applies it (name, address, port
// and meta, but not the incarnation); its ConflictDelegate hears of an
// alive message that claims a live member's name at another address (which
// memberlist refuses by itself); its MergeDelegate sees the whole member
// list of a peer that joins or is joined. Dead and suspect messages reach
// no delegate at all: memberlist applies them alone, so a member with the
// mesh key can still make memberlist think another member dead (the
// refutation of an incarnation pushed to 0xFFFFFFFF wraps to 0 and is
// ignored). gracewatch therefore takes no decision on memberlist's word
// alone: agents keep their aggregators in the book (book.go) and send to
// them directly, and an aggregator asks a node before it serves it down or
// unreachable (aggregator/probe.go).
//
// What is refused here, before memberlist's table changes:
//
//   - a name that is not a node name;
//   - a new name once the table holds maxMembers members (DefaultMaxMembers;
//     members gone for a while are evicted first): a member with the mesh key
//     cannot grow every member's memory without bound by inventing names;
//   - for an aggregator of the book, anything but its signed meta: an empty
//     or unsigned meta (which would cut it off every agent until all of them
//     restart), another member's, or its own signed meta announced at another
//     address than the one it signed (its address cannot be taken over: a
//     copied meta names the real aggregator's address);
//   - a member claiming the aggregator role without a valid signature;
//   - about this aggregator itself, a meta it did not publish (memberlist
//     would refute it with an incarnation that others may ignore), but for
//     its own signed meta from before this process started (previousLife:
//     a restart after a crash must be refuted, or no member takes its new
//     meta).
//
// DeadNodeReclaimTime stays 0 (memberlist's default): the address of a
// member memberlist holds dead is never reclaimed by another; that of a
// member it holds left (a dead message claimed from the member itself,
// which anyone can forge) is, except for an aggregator of the book. Such a
// takeover moves only memberlist's table: what the mesh sends a node goes
// to the address the node proved in its own signed message (reach.go).

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gracewatch/gracewatch/internal/nodename"
	"github.com/gracewatch/gracewatch/proto/gwpb"
	"github.com/hashicorp/memberlist"
	"google.golang.org/protobuf/encoding/protowire"
)

// DefaultMaxMembers bounds the members one member keeps (memberlist's table
// and the mesh's): 1.6 times the 10,000 nodes the design plans for, at
// about 1.5 KB each (a full table costs some 25 MB). Past it a new name is
// refused (logged, counted in gracewatch_mesh_refused_total{reason=
// "table_full"}) until members gone for a while are evicted.
const DefaultMaxMembers = 16384

// evictGoneAfter is how long a member must have been gone (dead or left)
// before a full table evicts it: memberlist itself forgets a dead member
// GossipToTheDeadTime (30 s on a LAN) after its death.
const evictGoneAfter = 2 * time.Minute

// evictEvery spaces the scans of a full table for members to evict.
const evictEvery = time.Second

// Refusal reasons (gracewatch_mesh_refused_total's label).
const (
	refusedName          = "invalid_name"
	refusedTableFull     = "table_full"
	refusedAggregatorMet = "aggregator_meta"
	refusedTakeover      = "address_takeover"
	refusedConflict      = "address_conflict"
	refusedMerge         = "merge_too_large"
	refusedSelf          = "self_meta"
	refusedStreams       = "streams_per_peer"
	refusedStreamsTotal  = "streams_total"
	refusedStreamBytes   = "stream_bytes"
	// refusedPacketExpansion: a packet whose compressed messages expand
	// past maxPacketExpanded (packetcheck.go).
	refusedPacketExpansion = "packet_expansion"
)

var refusalReasons = []string{refusedName, refusedTableFull, refusedAggregatorMet, refusedTakeover, refusedConflict, refusedMerge, refusedSelf, refusedStreams,
	refusedStreamsTotal, refusedStreamBytes, refusedPacketExpansion}

// refusals counts the refusals by reason.
type refusals struct {
	n [11]atomic.Uint64
}

func (r *refusals) add(reason string) {
	for i, x := range refusalReasons {
		if x == reason {
			r.n[i].Add(1)
		}
	}
}

// aliveFilter is memberlist's AliveDelegate, ConflictDelegate and
// MergeDelegate. Its methods run with memberlist's member lock held: they
// must not call memberlist.
type aliveFilter struct{ m *Mesh }

var (
	_ memberlist.AliveDelegate    = aliveFilter{}
	_ memberlist.ConflictDelegate = aliveFilter{}
	_ memberlist.MergeDelegate    = aliveFilter{}
)

// NotifyAlive refuses what judgeAlive refuses.
func (f aliveFilter) NotifyAlive(peer *memberlist.Node) error {
	return f.m.judgeAlive(peer.Name, peer.Addr, peer.Port, peer.Meta)
}

// NotifyConflict logs (rate-limited) an alive message that claims a live
// member at another address; memberlist refuses it by itself.
func (f aliveFilter) NotifyConflict(existing, other *memberlist.Node) {
	m := f.m
	m.refused.add(refusedConflict)
	addr := net.JoinHostPort(other.Addr.String(), strconv.Itoa(int(other.Port)))
	if ok, suppressed := m.badMsgs.Allow("conflict:"+existing.Name, time.Now()); ok {
		m.log.Warn("refused a claim of a live member's name at another address", "node", nodename.ForLog(existing.Name),
			"addr", net.JoinHostPort(existing.Addr.String(), strconv.Itoa(int(existing.Port))), "claimed_addr", addr, "suppressed", suppressed)
	}
}

// NotifyMerge refuses a join whose peer lists more members than this one
// keeps: a flood, not a cluster.
func (f aliveFilter) NotifyMerge(peers []*memberlist.Node) error {
	m := f.m
	if len(peers) <= m.maxMembers {
		return nil
	}
	m.refused.add(refusedMerge)
	err := fmt.Errorf("a join listing %d members refused: this member keeps at most %d", len(peers), m.maxMembers)
	if ok, suppressed := m.badMsgs.Allow("merge", time.Now()); ok {
		m.log.Warn("refused a join", "err", err, "suppressed", suppressed)
	}
	return err
}

// judgeAlive decides on an alive message about name (see the top of this
// file); an error refuses it.
func (m *Mesh) judgeAlive(name string, ip net.IP, port uint16, meta []byte) error {
	if name != m.name {
		// What memberlist already has (every push-pull repeats every
		// member, to every member): nothing to judge, nothing built.
		m.mu.Lock()
		st := m.members[name]
		same := st != nil && st.port == port && st.ip.Equal(ip) && bytes.Equal(st.raw, meta)
		m.mu.Unlock()
		if same {
			return nil
		}
	}
	now := m.now()
	addr := net.JoinHostPort(ip.String(), strconv.Itoa(int(port)))
	if name == m.name {
		if m.guard.signsMeta(m.role) && !m.ownMeta(meta) && !m.previousLife(meta, now) {
			return m.refuseAlive(refusedSelf, name, addr, errors.New("an alive message about this aggregator with a meta it did not publish"))
		}
		return nil
	}
	if err := nodename.Validate(name); err != nil {
		return m.refuseAlive(refusedName, name, addr, err)
	}
	m.mu.Lock()
	st, e := m.members[name], m.book[name]
	if e != nil && e.Addr == addr && bytes.Equal(e.raw, meta) && now.Before(e.SignedAt.Add(aggregatorProofValidity)) {
		m.mu.Unlock()
		return nil
	}
	full := st == nil && len(m.members) >= m.maxMembers && !m.evictLocked(now)
	var known AggregatorRef
	if e != nil {
		known = e.AggregatorRef
	}
	m.mu.Unlock()
	if full {
		return m.refuseAlive(refusedTableFull, name, addr, fmt.Errorf("the member table is full (%d members)", m.maxMembers))
	}
	if e == nil && metaRole(meta) != gwpb.Role_ROLE_AGGREGATOR {
		return nil // an agent's meta is a claim, judged where it is used
	}
	o, err := m.guard.openMeta(name, meta, now)
	switch {
	case e != nil && (err != nil || !o.proven || knownRole(o.meta.GetRole()) != gwpb.Role_ROLE_AGGREGATOR):
		if err == nil {
			err = errors.New("not its signed aggregator meta")
		}
		return m.refuseAlive(refusedAggregatorMet, name, addr, fmt.Errorf("an aggregator (signed at %s): %w",
			known.SignedAt.UTC().Format(time.RFC3339), err))
	case err != nil:
		if errors.Is(err, ErrUnproven) {
			return m.refuseAlive(refusedAggregatorMet, name, addr, err)
		}
		return nil // undecodable: the member shows with the error
	case o.proven && o.meta.GetAddr() != "" && o.meta.GetAddr() != addr:
		return m.refuseAlive(refusedTakeover, name, addr, fmt.Errorf("its meta is signed for %s", o.meta.GetAddr()))
	case e != nil && o.meta.GetAddr() == "" && addr != known.Addr && !o.signedAt.After(known.SignedAt):
		// An aggregator of an older release signs no address: a move is
		// taken only with a meta signed after the one known.
		return m.refuseAlive(refusedTakeover, name, addr, fmt.Errorf("it is at %s, and this meta was not signed after the one known there", known.Addr))
	}
	return nil
}

// previousLife reports whether meta is this aggregator's own signed meta
// from before this process started: the members still hold its previous
// life (a crash, a kill -9: no signed leave) at an incarnation that the
// new process, starting over, does not exceed, so they ignore its new
// meta. Let through, the alive message makes memberlist refute it with a
// higher incarnation and this process's meta, which then reaches every
// member (and with its new started_ms, makes the agents send their states
// here). It gives nobody more than what a replay of the current meta,
// which every member holds, already gives (the refutation of an
// incarnation pushed to its maximum wraps either way: see the top of this
// file).
func (m *Mesh) previousLife(meta []byte, now time.Time) bool {
	if !m.addrSigned.Load() {
		return false // New is still publishing this process's meta
	}
	o, err := m.guard.openMeta(m.name, meta, now)
	return err == nil && o.proven && knownRole(o.meta.GetRole()) == gwpb.Role_ROLE_AGGREGATOR &&
		o.signedAt.Before(m.started)
}

// refuseAlive counts and logs (rate-limited per reason and name) a refused
// alive message, and returns the error memberlist logs (rate-limited too).
func (m *Mesh) refuseAlive(reason, name, addr string, err error) error {
	m.refused.add(reason)
	if ok, suppressed := m.badMsgs.Allow("alive:"+reason+":"+name, time.Now()); ok {
		m.log.Warn("refused a member's alive message", "reason", reason, "node", nodename.ForLog(name), "addr", addr,
			"err", err, "suppressed", suppressed)
	}
	return fmt.Errorf("%s: %w", reason, err)
}

// refuseStream counts and logs (rate-limited per peer and reason) an
// inbound stream closed or failed for a bound of the stream guard
// (transport.go).
func (m *Mesh) refuseStream(peer, why string) {
	m.refused.add(why)
	if ok, suppressed := m.badMsgs.Allow("streams:"+why+":"+peer, time.Now()); ok {
		switch why {
		case refusedStreams:
			m.log.Warn("closed an inbound stream: its peer has too many open", "peer", peer, "max", maxStreamsPerPeer, "suppressed", suppressed)
		case refusedStreamsTotal:
			m.log.Warn("closed an inbound stream: too many open from all peers", "peer", peer, "max", maxStreamsTotal, "suppressed", suppressed)
		case refusedPacketExpansion:
			m.log.Warn("dropped a packet: its compressed messages expand past the bound", "peer", peer,
				"max_bytes", maxPacketExpanded, "suppressed", suppressed)
		default:
			m.log.Warn("dropped an inbound stream: the streams open at once hold their byte bound", "peer", peer,
				"max_bytes", maxStreamBytes, "free_bytes_each", streamFreeBytes, "suppressed", suppressed)
		}
	}
}

// ownMeta reports whether meta is what this member published (now or
// just before).
func (m *Mesh) ownMeta(meta []byte) bool {
	if b := m.metaBytes.Load(); b != nil && bytes.Equal(*b, meta) {
		return true
	}
	if b := m.prevMeta.Load(); b != nil && bytes.Equal(*b, meta) {
		return true
	}
	return false
}

// evictLocked removes from a full table the members gone for
// evictGoneAfter (not in the book, not this one), at most once every
// evictEvery; it reports whether room was made. m.mu is held.
func (m *Mesh) evictLocked(now time.Time) bool {
	if now.Sub(m.lastEvict) < evictEvery && !now.Before(m.lastEvict) {
		return false
	}
	m.lastEvict = now
	n := 0
	for name, st := range m.members {
		if name == m.name || m.book[name] != nil || !(st.Status == StatusDead || st.Status == StatusLeft) ||
			now.Sub(st.Since) < evictGoneAfter {
			continue
		}
		delete(m.members, name)
		n++
	}
	if n > 0 {
		m.log.Info("member table full: members gone for a while forgotten", "forgotten", n, "max", m.maxMembers)
	}
	return len(m.members) < m.maxMembers
}

// metaRole reads the role (field 2) of an encoded meta without decoding
// it; ROLE_UNSPECIFIED when it cannot.
func metaRole(b []byte) gwpb.Role {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return gwpb.Role_ROLE_UNSPECIFIED
		}
		b = b[n:]
		if num == 2 && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return gwpb.Role_ROLE_UNSPECIFIED
			}
			return gwpb.Role(v)
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return gwpb.Role_ROLE_UNSPECIFIED
		}
		b = b[n:]
	}
	return gwpb.Role_ROLE_UNSPECIFIED
}
