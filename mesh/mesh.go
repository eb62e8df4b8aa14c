// Package mesh is the gossip layer that node agents and aggregators join: a
// hashicorp/memberlist cluster, encrypted with a keyring and kept apart from
// other clusters by a label. Each member publishes its compact state in its
// memberlist meta (gwpb.Meta, at most MetaLimit bytes) and sends direct
// messages (gwpb.Envelope) over TCP. Gossip broadcasts of user data are not
// used: they starve at scale.
package mesh

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gracewatch/gracewatch/internal/nodename"
	"github.com/gracewatch/gracewatch/internal/ratelog"
	"github.com/gracewatch/gracewatch/proto/gwpb"
	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
)

// Sentinel errors, wrapped with the node or the operation.
var (
	ErrUnknownMember = errors.New("unknown member")
	ErrNotAlive      = errors.New("member not alive")
	ErrClosed        = errors.New("mesh left or shut down")
)

const (
	// metaUpdateTimeout bounds SetMeta's wait for its broadcast.
	metaUpdateTimeout = 5 * time.Second
	// resolveTimeout bounds the DNS lookup of one seed.
	resolveTimeout = 2 * time.Second
	// badMessageLogEvery rate-limits the log of undecodable messages.
	badMessageLogEvery = 10 * time.Second
	// sendParallel bounds SendToRole's concurrent connections.
	sendParallel = 16
)

// Options configure New.
type Options struct {
	// Name is the unique member name: the node name for agents, e.g.
	// "agg-1" for aggregators.
	Name string
	Role gwpb.Role
	// Config is the [mesh] table; New validates it.
	Config Config
	// Meta is the initial meta. New forces its Role to Role and its Schema
	// to gwpb.SchemaVersion (on a copy). Nil publishes just those two.
	Meta *gwpb.Meta
	// Handler may be nil.
	Handler Handler
	// Logger may be nil (nothing is logged). Records carry
	// component=mesh; memberlist's own lines also lib=memberlist.
	Logger *slog.Logger
	// Profile is "lan" (default: memberlist.DefaultLANConfig) or "local"
	// (memberlist.DefaultLocalConfig: faster failure detection, for tests
	// and benchmarks).
	Profile string
	// Keys, if set, are used instead of those Config's key files name
	// (benchmarks, tests). Without either, New requires
	// Config.AllowUnsigned.
	Keys *Keys
	// Tune, if set, is called with memberlist's configuration just before
	// New starts memberlist, once New has filled it in. It exists for
	// benchmarks that run many members in one process (a lighter
	// Transport, no compression); programs leave it nil.
	Tune func(*memberlist.Config)
	// MaxMembers bounds the member table (0: DefaultMaxMembers); see
	// alive.go.
	MaxMembers int
	// Registry, if set, receives the mesh's metrics (gracewatch_mesh_*,
	// metrics.go).
	Registry prometheus.Registerer

	now func() time.Time // tests: the wall clock of the proofs
}

// Mesh is this process's membership of the mesh. Its methods are safe for
// concurrent use.
type Mesh struct {
	name    string
	role    gwpb.Role
	seeds   []string
	log     *slog.Logger
	handler Handler
	ml      *memberlist.Memberlist

	// life serialises Leave and Shutdown (memberlist panics on Leave after
	// Shutdown). Other calls only look at the flags: they do not hold it
	// while they wait on the network, so that Shutdown never waits for them.
	life     sync.RWMutex
	left     bool
	shutdown bool

	metaMu    sync.Mutex
	meta      *gwpb.Meta
	leaving   bool
	metaBytes atomic.Pointer[[]byte] // what NodeMeta returns
	prevMeta  atomic.Pointer[[]byte] // what it returned before

	mu         sync.Mutex
	members    map[string]*memberState
	maxMembers int
	lastEvict  time.Time
	// book is the aggregators as gracewatch knows them (book.go), and
	// seedAddrs the configured seeds' addresses.
	book      map[string]*bookEntry
	seedAddrs map[string]bool
	// reach is the address each node proved it is reached at (reach.go).
	reach map[string]netip.AddrPort

	joined      atomic.Bool
	joinFailing atomic.Bool // the last join attempt failed (log the change only)

	// dropped counts the direct messages dropped before the Handler, by
	// droppedReasons: their log lines are rate-limited, the count is not.
	dropped [2]atomic.Uint64

	stopOnce     sync.Once
	stop         chan struct{}
	loopDone     chan struct{} // nil when the rejoin loop does not run
	shutdownOnce sync.Once
	shutdownErr  error

	badMsgs  *ratelog.Limiter
	refused  refusals
	guard    *guard
	now      func() time.Time // the wall clock; tests move it
	authDone chan struct{}    // nil when the auth loop does not run

	// memberLines bounds the lines about one member (log.go); linesHeld
	// counts those it held back.
	memberLines *ratelog.Budget
	linesHeld   atomic.Uint64

	// started is when this Mesh was made: an aggregator signs it in its
	// meta (started_ms), and an alive message about itself with a meta it
	// signed before then is its previous life's (alive.go).
	started time.Time
	// bg is the joins of restarted aggregators in flight (ack.go);
	// Shutdown waits for them.
	bg sync.WaitGroup
	// addrSigned: New has published this aggregator's meta with its
	// address and start. Until then memberlist must not refute anything
	// (previousLife): a refutation during New's UpdateNode raises the
	// incarnation under it, and memberlist then drops the update and
	// times out.
	addrSigned atomic.Bool
}

// memberState is a Member with what the mesh needs to reach and judge it.
type memberState struct {
	Member
	ip      net.IP
	port    uint16
	raw     []byte // the meta as received
	badMeta []byte // the last undecodable meta that was logged
	leaving bool   // its meta carries the leaving mark
	// hidden: its meta is unproven and it never proved itself here, so
	// it is kept from Members, AliveMembers and the Handler (a rogue
	// member's invented name makes no phantom node).
	hidden bool
	// proofUntil is when an aggregator's meta proof expires (zero for
	// others and for unproven metas).
	proofUntil time.Time
}

// New validates o, starts memberlist (real UDP and TCP sockets on
// Config.Bind), makes one attempt to join the seeds and starts the rejoin
// loop. A failed join is logged and retried by the loop, not an error. New
// returns once the first attempt has finished: with unreachable seeds that
// can take the profile's TCP timeout per seed (10 s for "lan").
func New(o Options) (*Mesh, error) {
	if err := nodename.Validate(o.Name); err != nil {
		return nil, fmt.Errorf("mesh options: name: %w", err)
	}
	if err := o.Config.ValidateRole(o.Role); err != nil && o.Keys == nil {
		return nil, err
	} else if err := o.Config.Validate(); err != nil {
		return nil, err
	}
	keys := o.Keys
	if keys == nil {
		var err error
		if keys, err = o.Config.LoadKeys(o.Role); err != nil {
			return nil, err
		}
	}
	var mc *memberlist.Config
	switch o.Profile {
	case "", "lan":
		mc = memberlist.DefaultLANConfig()
	case "local":
		mc = memberlist.DefaultLocalConfig()
	default:
		return nil, fmt.Errorf("mesh options: profile %q: want \"lan\" or \"local\"", o.Profile)
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "mesh")
	cfg := o.Config
	m := &Mesh{
		name:    o.Name,
		role:    o.Role,
		seeds:   slices.Clone(cfg.Join),
		log:     logger,
		handler: o.Handler,
		members: make(map[string]*memberState),
		book:    make(map[string]*bookEntry),
		reach:   make(map[string]netip.AddrPort),
		stop:    make(chan struct{}),
		badMsgs: ratelog.New(badMessageLogEvery),
		meta:    initialMeta(o.Meta, o.Role),
		guard:   newGuard(keys, o.Config.AllowUnsigned || (o.Config.Insecure && keys == nil)),
		now:     o.now,
	}
	if m.now == nil {
		m.now = time.Now
	}
	m.started = m.now()
	m.maxMembers = o.MaxMembers
	if m.maxMembers <= 0 {
		m.maxMembers = DefaultMaxMembers
	}
	m.memberLines = ratelog.NewBudget(memberLogLines, memberLogEvery, m.maxMembers)
	m.seedAddrs = literalSeeds(m.seeds)
	if err := m.storeMetaLocked(); err != nil {
		return nil, err
	}

	mc.Name = o.Name
	mc.BindAddr, mc.BindPort = splitIPPort(cfg.Bind)
	if cfg.Advertise != "" {
		mc.AdvertiseAddr, mc.AdvertisePort = splitIPPort(cfg.Advertise)
	} else {
		mc.AdvertiseAddr, mc.AdvertisePort = "", mc.BindPort
	}
	mc.Label = cfg.Label
	if cfg.Insecure {
		logger.Warn("gossip is not encrypted (mesh.insecure = true): anyone who reaches the port can join and read it")
	} else {
		kr, err := LoadKeyring(cfg.Keyring)
		if err != nil {
			return nil, err
		}
		mc.Keyring = kr
		mc.GossipVerifyIncoming = true
		mc.GossipVerifyOutgoing = true
	}
	switch {
	case m.guard.allowUnsigned:
		logger.Warn("node restriction is off (mesh.allow_unsigned = true): metas and messages without a proof are accepted, so anyone with the mesh key can speak for any node that has no key yet, or command agents",
			"own_keys", keys.canSign())
	case !keys.canSign():
		return nil, errors.New("mesh: no keys to prove this member with (set the key files, or mesh.allow_unsigned = true)")
	}
	mc.Delegate = delegate{m}
	mc.Events = events{m}
	mc.Alive, mc.Conflict, mc.Merge = aliveFilter{m}, aliveFilter{m}, aliveFilter{m}
	// An aggregator's acks carry its signed meta: a restart is seen at the
	// next probe (ack.go).
	mc.Ping = pinger{m}
	// A dead member's address is never reclaimed by another (alive.go).
	mc.DeadNodeReclaimTime = 0
	mc.Logger = newStdLogger(logger)
	if o.Tune != nil {
		o.Tune(mc)
	}
	if mc.Transport == nil {
		nt, err := newNetTransport(mc, mc.Logger)
		if err != nil {
			return nil, fmt.Errorf("start memberlist on %s: %w", cfg.Bind, err)
		}
		mc.Transport = nt
	}
	guard := guardStreams(mc.Transport, net.ParseIP(mc.BindAddr), maxStreamsPerPeer, mc.Label, mc.Keyring, m.refuseStream)
	mc.Transport = guard

	ml, err := memberlist.Create(mc)
	if err != nil {
		guard.Shutdown()
		return nil, fmt.Errorf("start memberlist on %s: %w", cfg.Bind, err)
	}
	m.ml = ml
	if m.guard.signsMeta(m.role) {
		// An aggregator signs the address it is reached at with its
		// meta, before anyone sees it (alive.go): memberlist knows it only
		// now. It signs its start too: an agent that sees it change sends
		// this new process its full state (book.go, AggregatorRef.Started).
		m.metaMu.Lock()
		m.meta.Addr = m.Addr()
		m.meta.StartedMs = m.started.UnixMilli()
		err := m.storeMetaLocked()
		m.metaMu.Unlock()
		if err == nil {
			err = ml.UpdateNode(metaUpdateTimeout)
		}
		if err != nil {
			ml.Shutdown()
			return nil, fmt.Errorf("mesh: sign this aggregator's address: %w", err)
		}
		m.addrSigned.Store(true)
	}
	if o.Registry != nil {
		if err := o.Registry.Register(meshCollector{m}); err != nil {
			ml.Shutdown()
			return nil, fmt.Errorf("mesh: metrics: %w", err)
		}
	}
	logger.Info("mesh started", "name", o.Name, "role", o.Role.String(), "addr", m.Addr(),
		"label", cfg.Label, "encrypted", !cfg.Insecure, "seeds", len(m.seeds))

	if len(m.seeds) == 0 {
		m.joined.Store(true)
	} else {
		m.joinSeeds()
	}
	// An aggregator runs the loop without seeds too: it rejoins the
	// members it saw die (see rejoinDead).
	if every := cfg.RejoinInterval.D(); every > 0 && (len(m.seeds) > 0 || m.role == gwpb.Role_ROLE_AGGREGATOR) {
		m.loopDone = make(chan struct{})
		go m.rejoinLoop(every)
	}
	if keys != nil {
		m.authDone = make(chan struct{})
		go m.authLoop(authCheckEvery)
	}
	return m, nil
}

func initialMeta(meta *gwpb.Meta, role gwpb.Role) *gwpb.Meta {
	if meta == nil {
		meta = &gwpb.Meta{}
	} else {
		meta = proto.CloneOf(meta)
	}
	meta.Role = role
	meta.Schema = gwpb.SchemaVersion
	return meta
}

// storeMetaLocked encodes m.meta (with the leaving mark if leaving) for
// NodeMeta. m.metaMu is held, or m is not shared yet.
func (m *Mesh) storeMetaLocked() error {
	b, err := m.encodeOwnMetaLocked(MetaLimit)
	if err != nil {
		return err
	}
	if prev := m.metaBytes.Swap(&b); prev != nil {
		m.prevMeta.Store(prev)
	}
	return nil
}

// encodeOwnMetaLocked encodes m.meta within limit: the meta, the leaving
// mark if leaving, and this member's proof over both.
func (m *Mesh) encodeOwnMetaLocked(limit int) ([]byte, error) {
	limit -= m.guard.proofSize(m.role)
	if m.leaving {
		limit -= len(appendLeaving(nil))
	}
	b, err := encodeMeta(m.meta, limit)
	if err != nil {
		return nil, err
	}
	if m.leaving {
		b = appendLeaving(b)
	}
	return m.guard.sealMeta(m.name, m.role, b, m.now()), nil
}

// Proves reports whether this member proves its messages (it has keys):
// then aggregators take its state from its direct messages only, and what
// it gossips is not read for state by those that check proofs.
func (m *Mesh) Proves() bool { return m.guard.keys.canSign() }

// Name returns this member's name.
func (m *Mesh) Name() string { return m.name }

// Addr returns the host:port other members reach this one at: the advertise
// address, else the bound one (with the port picked when Bind had port 0;
// with Bind 0.0.0.0, the private address memberlist chose).
func (m *Mesh) Addr() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if st := m.members[m.name]; st != nil {
		return st.Addr
	}
	return ""
}

// SetMeta publishes meta (its Role and Schema forced as in Options.Meta; meta
// itself is not modified): encoded with EncodeMeta, stored, and announced
// with memberlist's UpdateNode. It blocks until the announcement has been
// gossiped or 5 s have passed; after that timeout the meta is still
// published (push-pull carries it) and the error says so. Concurrent calls
// are safe: the last one stored wins.
func (m *Mesh) SetMeta(meta *gwpb.Meta) error {
	if meta == nil {
		return errors.New("set meta: nil meta")
	}
	if m.closed(true) {
		return fmt.Errorf("set meta: %w", ErrClosed)
	}
	m.metaMu.Lock()
	old := m.meta
	m.meta = initialMeta(meta, m.role)
	// An aggregator's signed address and start stay.
	m.meta.Addr, m.meta.StartedMs = old.GetAddr(), old.GetStartedMs()
	if err := m.storeMetaLocked(); err != nil {
		m.meta = old
		m.metaMu.Unlock()
		return fmt.Errorf("set meta: %w", err)
	}
	m.metaMu.Unlock()
	if err := m.ml.UpdateNode(metaUpdateTimeout); err != nil {
		return fmt.Errorf("set meta: stored, but the update was not gossiped within %v (push-pull will carry it): %w",
			metaUpdateTimeout, err)
	}
	return nil
}

// Members returns every member ever seen by this process, this one
// included, dead and left ones too, sorted by name.
func (m *Mesh) Members() []Member {
	m.mu.Lock()
	out := make([]Member, 0, len(m.members))
	for _, st := range m.members {
		if !st.hidden {
			out = append(out, st.Member)
		}
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// NumMembers returns memberlist's count of live members (alive or suspect),
// this one included.
func (m *Mesh) NumMembers() int { return m.ml.NumMembers() }

// Joined reports whether a join with at least one seed has completed (or a
// seed has joined us: all seeds are live members). It is true at once when
// there are no seeds.
func (m *Mesh) Joined() bool { return m.joined.Load() }

// Forget removes a member that is dead or has left from Members; it
// reports whether it did (false for an unknown or live member). memberlist
// forgets a dead member by itself GossipToTheDeadTime after its death; this
// is for the mesh's own table, which keeps every member it has seen.
func (m *Mesh) Forget(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.members[name]
	if !ok || name == m.name || (st.Status != StatusDead && st.Status != StatusLeft) {
		return false
	}
	delete(m.members, name)
	delete(m.reach, name)
	return true
}

// AliveMembers returns the names of the alive members of role but this
// one, sorted.
func (m *Mesh) AliveMembers(role gwpb.Role) []string {
	var names []string
	m.mu.Lock()
	for name, st := range m.members {
		if name != m.name && st.Status == StatusAlive && st.Role == role && !st.hidden {
			names = append(names, name)
		}
	}
	m.mu.Unlock()
	slices.Sort(names)
	return names
}

// Leave announces that this member leaves on purpose, so that the others
// record it as left, not dead, and stops the rejoin loop. It waits up to
// timeout (0: no limit) for the announcements to be gossiped. Call Shutdown
// afterwards; after Leave, SetMeta fails with ErrClosed.
func (m *Mesh) Leave(timeout time.Duration) error {
	m.life.Lock()
	defer m.life.Unlock()
	if m.shutdown {
		return fmt.Errorf("leave: %w", ErrClosed)
	}
	if m.left {
		return nil
	}
	m.left = true
	m.stopLoop()
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	// memberlist's dead message does not reach the others' event delegate
	// as "left", so the meta says it first; it must be gossiped before the
	// dead message, which would cancel it.
	m.metaMu.Lock()
	m.leaving = true
	err := m.storeMetaLocked()
	m.metaMu.Unlock()
	if err == nil {
		half := time.Duration(0) // memberlist: no limit
		if timeout > 0 {
			half = max(timeout/2, time.Millisecond)
		}
		if err := m.ml.UpdateNode(half); err != nil {
			m.log.Debug("leave: leaving mark not gossiped in time", "err", err)
		}
	}
	remaining := time.Duration(0)
	if timeout > 0 {
		remaining = max(time.Until(deadline), time.Millisecond)
	}
	if err := m.ml.Leave(remaining); err != nil {
		return fmt.Errorf("leave: %w", err)
	}
	m.log.Info("left the mesh", "name", m.name)
	return nil
}

// Shutdown stops the rejoin loop and memberlist (without a leave
// announcement: use Leave first for that). It is idempotent.
func (m *Mesh) Shutdown() error {
	m.shutdownOnce.Do(func() {
		m.life.Lock()
		m.shutdown = true
		m.life.Unlock()
		m.stopLoop()
		m.shutdownErr = m.ml.Shutdown()
		if m.loopDone != nil {
			<-m.loopDone
		}
		if m.authDone != nil {
			<-m.authDone
		}
		m.bg.Wait()
		m.log.Debug("mesh shut down", "name", m.name)
	})
	return m.shutdownErr
}

// closed reports whether Shutdown (or, with orLeft, Leave) was called.
func (m *Mesh) closed(orLeft bool) bool {
	m.life.RLock()
	defer m.life.RUnlock()
	return m.shutdown || (orLeft && m.left)
}

func (m *Mesh) stopLoop() { m.stopOnce.Do(func() { close(m.stop) }) }

func (m *Mesh) stopped() bool {
	select {
	case <-m.stop:
		return true
	default:
		return false
	}
}
