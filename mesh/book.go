package mesh

// The aggregator book: gracewatch's own view of the aggregators, kept from
// their signed metas and the configured seeds, not from memberlist's
// failure detection. memberlist's alive, suspect and dead messages are not
// authenticated: one forged packet can make every member think an
// aggregator dead or left for minutes (an incarnation pushed to its
// maximum wraps the refutation to 0, which everyone ignores). So an agent
// does not stop sending its state to an aggregator because memberlist says
// so: it keeps one in the book, at the address its signed meta names,
// until the aggregator signs its leave, or until neither gossip brings a
// valid proof of it nor a direct contact has reached it for bookKeep (an
// aggregator that is really gone). The address is never taken from an
// unsigned claim (see judgeAlive).

import (
	"bytes"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// bookKeep is how long an aggregator stays in the book after its proof
// expired (gossip no longer brings its re-signed meta) and since the last
// direct proof of life (a delivered send, a signed message from it).
const bookKeep = aggregatorProofValidity

// AggregatorRef is an aggregator as this member's book knows it. It is a
// value.
type AggregatorRef struct {
	Name string
	// Addr is where it is reached: the address its signed meta names.
	Addr string
	// Gossip is what memberlist says of it: alive, or dead or left (a
	// leave it did not sign: one it signs removes it from the book).
	Gossip Status
	// GossipSince is when Gossip last changed.
	GossipSince time.Time
	// SignedAt is the signing time of its newest meta seen here.
	SignedAt time.Time
	// Started is when the aggregator process started, as its newest
	// proven meta says (started_ms); zero for an aggregator of an older
	// release. A change means a new process, which has none of the
	// states sent to the one before (agent/meshlink).
	Started time.Time
	// LastContact is the last direct proof of life: a message delivered
	// to it, or a signed message from it. Zero when none.
	LastContact time.Time
	// Seed: its address is one of the configured seeds (mesh.join); it is
	// never dropped from the book.
	Seed bool
}

// Lost reports whether gossip has lost the aggregator at now: memberlist
// says it is dead or left, or its proof has expired (gossip no longer
// brings its re-signed meta). The book still holds it, and messages still
// go to it directly.
func (a AggregatorRef) Lost(now time.Time) bool {
	return a.Gossip != StatusAlive || !now.Before(a.SignedAt.Add(aggregatorProofValidity))
}

// bookEntry is one aggregator of the book. Guarded by Mesh.mu.
type bookEntry struct {
	AggregatorRef
	ip   net.IP
	port uint16
	raw  []byte // its newest proven meta, as received
	lost bool   // Lost when last logged
	// restartJoin is when an ack that named a new start of it last made
	// this member join it (ack.go).
	restartJoin time.Time
}

// Aggregators returns the aggregators of the book, sorted by name; this
// member is never among them.
func (m *Mesh) Aggregators() []AggregatorRef {
	m.mu.Lock()
	out := make([]AggregatorRef, 0, len(m.book))
	for _, e := range m.book {
		out = append(out, e.AggregatorRef)
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b AggregatorRef) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// bookProvenLocked records a proven aggregator meta of st (signed at
// o.signedAt). A signed leave removes it from the book; it reports whether
// it did. m.mu is held.
func (m *Mesh) bookProvenLocked(st *memberState, o openedMeta, raw []byte, now time.Time) (left bool) {
	if st.Name == m.name {
		return false
	}
	e := m.book[st.Name]
	if o.leaving {
		if e != nil {
			delete(m.book, st.Name)
			return true
		}
		return false
	}
	if e == nil {
		e = &bookEntry{AggregatorRef: AggregatorRef{Name: st.Name, Gossip: StatusAlive, GossipSince: now}}
		m.book[st.Name] = e
	}
	if o.signedAt.Before(e.SignedAt) {
		return false // an older meta (late, or replayed): the newer one stays
	}
	e.SignedAt, e.raw = o.signedAt, bytes.Clone(raw)
	e.Started = time.Time{}
	if ms := o.meta.GetStartedMs(); ms != 0 {
		e.Started = time.UnixMilli(ms)
	}
	e.Addr, e.ip, e.port = st.Addr, slices.Clone(st.ip), st.port
	e.Seed = m.seedAddrs[e.Addr]
	return false
}

// bookStatusLocked records memberlist's word about name, if it is in the
// book. m.mu is held.
func (m *Mesh) bookStatusLocked(name string, status Status, now time.Time) {
	if e := m.book[name]; e != nil && e.Gossip != status {
		e.Gossip, e.GossipSince = status, now
	}
}

// noteContact records a direct proof of life of name, if it is in the
// book.
func (m *Mesh) noteContact(name string, now time.Time) {
	m.mu.Lock()
	if e := m.book[name]; e != nil && now.After(e.LastContact) {
		e.LastContact = now
	}
	m.mu.Unlock()
}

// bookChange is a change of the book to log.
type bookChange struct {
	ref  AggregatorRef
	kind string // "lost", "found", "dropped"
}

// upkeepBook logs the aggregators that gossip lost or found again since
// the last call, and drops those with neither a valid proof nor a direct
// contact for bookKeep (never a seed). It runs on the auth loop, and after
// every event about an aggregator.
func (m *Mesh) upkeepBook(now time.Time) {
	var changes []bookChange
	m.mu.Lock()
	for name, e := range m.book {
		lost := e.Lost(now)
		switch {
		case lost && !e.Seed && now.After(e.SignedAt.Add(aggregatorProofValidity+bookKeep)) &&
			now.After(e.LastContact.Add(bookKeep)):
			delete(m.book, name)
			changes = append(changes, bookChange{e.AggregatorRef, "dropped"})
		case lost != e.lost:
			e.lost = lost
			kind := "found"
			if lost {
				kind = "lost"
			}
			changes = append(changes, bookChange{e.AggregatorRef, kind})
		}
	}
	m.mu.Unlock()
	for _, c := range changes {
		a := c.ref
		switch c.kind {
		case "lost":
			m.memberLine(slog.LevelWarn, a.Name, "aggregator lost by gossip: still reached directly at the address it signed (memberlist's word alone is not proof: its leave is not signed)",
				"aggregator", a.Name, "addr", a.Addr, "gossip", string(a.Gossip), "signed_at", a.SignedAt.UTC().Format(time.RFC3339))
		case "found":
			m.memberLine(slog.LevelInfo, a.Name, "aggregator back in gossip", "aggregator", a.Name, "addr", a.Addr)
		case "dropped":
			m.log.Warn("aggregator dropped: gone from gossip and not reached directly since",
				"aggregator", a.Name, "addr", a.Addr, "last_contact", a.LastContact.UTC().Format(time.RFC3339), "keep", bookKeep)
		}
	}
}

// resolveSeeds resolves the configured seeds (each DNS name within
// resolveTimeout) and marks the book's aggregators at a seed's address. It
// runs on the auth loop.
func (m *Mesh) resolveSeeds() {
	addrs := map[string]bool{}
	for _, seed := range m.seeds {
		a, _ := m.seedAddrsOf(seed) // one that does not resolve marks nothing; the rejoin loop logs it
		for _, x := range a {
			addrs[x] = true
		}
	}
	m.mu.Lock()
	m.seedAddrs = addrs
	for _, e := range m.book {
		e.Seed = addrs[e.Addr]
	}
	m.mu.Unlock()
}

// literalSeeds returns the seeds given as IP literals, normalised as
// member addresses are.
func literalSeeds(seeds []string) map[string]bool {
	out := map[string]bool{}
	for _, seed := range seeds {
		host, port, err := net.SplitHostPort(seed)
		if err != nil {
			continue
		}
		if ip := net.ParseIP(host); ip != nil {
			if n, err := strconv.Atoi(port); err == nil {
				out[net.JoinHostPort(ip.String(), strconv.Itoa(n))] = true
			}
		}
	}
	return out
}
