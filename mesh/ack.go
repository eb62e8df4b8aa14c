package mesh

// An aggregator's acks carry its signed meta (memberlist's PingDelegate),
// so that a member learns within a probe round that an aggregator of its
// book is a new process. After a crash, a kill -9 or a power cut the new
// process answers the pings addressed to its name, so memberlist never
// sees it die; the members hold its previous life at an incarnation that
// the new process, starting over, does not exceed, so memberlist ignores
// its new meta; and a new process without seeds knows no member until one
// pushes and pulls with it (each member does every 30 s, with a random
// member: minutes, at random). Meanwhile the agents, which send their
// state only when it changes, send it nothing, and with node restriction
// it serves no node at all.
//
// A member whose ack from an aggregator of its book carries a proven meta
// signed after the one known, naming another start (started_ms), takes it
// as memberlist would take a newer alive message (the member table, the
// book, the Handler: an agent then sends the new process its full state),
// and joins the aggregator once: one push-pull gives the new process the
// member list and its previous life's alive message, which it refutes
// (alive.go, previousLife), and the refutation's gossip brings its new
// meta to every member.

import (
	"bytes"
	"time"

	"github.com/gracewatch/gracewatch/proto/gwpb"
	"github.com/hashicorp/memberlist"
)

// restartJoinEvery bounds the joins of one aggregator that its acks
// trigger (ackedMeta).
const restartJoinEvery = 10 * time.Second

// pinger is memberlist's PingDelegate. NotifyPingComplete runs on
// memberlist's probe goroutine, without its member lock; AckPayload on its
// packet handler: neither blocks.
type pinger struct{ m *Mesh }

var _ memberlist.PingDelegate = pinger{}

// AckPayload is this aggregator's signed meta, as NodeMeta returns it;
// nothing from a member that does not sign its meta (agents: an ack is a
// UDP packet to every prober, and theirs would prove nothing).
func (p pinger) AckPayload() []byte {
	if !p.m.guard.signsMeta(p.m.role) {
		return nil
	}
	if b := p.m.metaBytes.Load(); b != nil && len(*b) <= MetaLimit {
		return *b
	}
	return nil
}

// NotifyPingComplete hands an ack's payload to ackedMeta.
func (p pinger) NotifyPingComplete(other *memberlist.Node, _ time.Duration, payload []byte) {
	if len(payload) == 0 || len(payload) > MetaLimit || other == nil {
		return
	}
	p.m.ackedMeta(other.Name, payload)
}

// ackedMeta takes raw, the meta an ack of aggregator name carried, if it
// is a new process's (see the top of this file): proven, signed after the
// newest meta known of it and for the address it is known at, and naming
// another start. It reports whether it did.
func (m *Mesh) ackedMeta(name string, raw []byte) bool {
	now := m.now()
	m.mu.Lock()
	e, st := m.book[name], m.members[name]
	if e == nil || st == nil || bytes.Equal(e.raw, raw) || bytes.Equal(st.raw, raw) {
		m.mu.Unlock()
		return false
	}
	known := e.AggregatorRef
	m.mu.Unlock()
	o, err := m.guard.openMeta(name, raw, now)
	switch {
	case err != nil || !o.proven || o.leaving || knownRole(o.meta.GetRole()) != gwpb.Role_ROLE_AGGREGATOR:
		return false
	case !o.signedAt.After(known.SignedAt) || o.meta.GetAddr() != known.Addr:
		return false
	case o.meta.GetStartedMs() == 0 || o.meta.GetStartedMs() == known.Started.UnixMilli():
		return false // the same process signed again: gossip carries it
	}
	m.mu.Lock()
	e, st = m.book[name], m.members[name]
	if e == nil || st == nil || st.Addr != known.Addr || !o.signedAt.After(e.SignedAt) {
		m.mu.Unlock()
		return false
	}
	m.decodeMemberMeta(st, raw, now) // proven above: no error to log, no leave
	st.Signs = m.guard.everProven(name)
	mem, hidden := st.Member, st.hidden
	join := now.Sub(e.restartJoin) >= restartJoinEvery || now.Before(e.restartJoin)
	if join {
		e.restartJoin = now
	}
	m.mu.Unlock()
	m.log.Info("aggregator restarted: its ack carries the meta of a new process",
		"aggregator", name, "addr", known.Addr, "started", time.UnixMilli(o.meta.GetStartedMs()).UTC().Format(time.RFC3339Nano),
		"was_started", known.Started.UTC().Format(time.RFC3339Nano))
	m.upkeepBook(now)
	if !hidden && m.handler != nil {
		m.handler.MemberChanged(mem)
	}
	if join {
		m.life.RLock()
		join = !m.shutdown && !m.left
		if join {
			m.bg.Add(1) // before Shutdown waits: it sets shutdown first
		}
		m.life.RUnlock()
	}
	if join {
		go func() {
			defer m.bg.Done()
			if n, err := m.ml.Join([]string{known.Addr}); n > 0 {
				m.log.Info("joined a restarted aggregator", "aggregator", name, "addr", known.Addr)
			} else {
				m.log.Debug("cannot join a restarted aggregator (gossip still brings it the members)", "aggregator", name, "addr", known.Addr, "err", flatten(err))
			}
		}()
	}
	return true
}
