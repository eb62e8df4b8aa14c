// Package mesh is the gossip layer that node agents and aggregators join: a
// hashicorp/memberlist cluster, encrypted with a keyring and kept apart from
// other clusters by a label. Each member publishes its compact state in its
// memberlist meta (gwpb.Meta, at most MetaLimit bytes) and sends direct
// messages (gwpb.Envelope) over TCP. Gossip broadcasts of user data are not
// used: they starve at scale.
package mesh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gracewatch/gracewatch/proto/gwpb"
	"github.com/hashicorp/memberlist"
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
	// Tune, if set, is called with memberlist's configuration just before
	// New starts memberlist, once New has filled it in. It exists for
	// benchmarks that run many members in one process (a lighter
	// Transport, no compression); programs leave it nil.
	Tune func(*memberlist.Config)
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

	mu      sync.Mutex
	members map[string]*memberState

	joined      atomic.Bool
	joinFailing atomic.Bool // the last join attempt failed (log the change only)

	stopOnce     sync.Once
	stop         chan struct{}
	loopDone     chan struct{} // nil when the rejoin loop does not run
	shutdownOnce sync.Once
	shutdownErr  error

	badMsgs limiter
}

// memberState is a Member with what the mesh needs to reach and judge it.
type memberState struct {
	Member
	ip      net.IP
	port    uint16
	raw     []byte // the meta as received
	badMeta []byte // the last undecodable meta that was logged
	leaving bool   // its meta carries the leaving mark
}

// New validates o, starts memberlist (real UDP and TCP sockets on
// Config.Bind), makes one attempt to join the seeds and starts the rejoin
// loop. A failed join is logged and retried by the loop, not an error. New
// returns once the first attempt has finished: with unreachable seeds that
// can take the profile's TCP timeout per seed (10 s for "lan").
func New(o Options) (*Mesh, error) {
	if o.Name == "" {
		return nil, errors.New("mesh options: empty name")
	}
	if err := o.Config.Validate(); err != nil {
		return nil, err
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
		stop:    make(chan struct{}),
		badMsgs: limiter{every: badMessageLogEvery},
		meta:    initialMeta(o.Meta, o.Role),
	}
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
	mc.Delegate = delegate{m}
	mc.Events = events{m}
	mc.Logger = newStdLogger(logger)
	if o.Tune != nil {
		o.Tune(mc)
	}

	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("start memberlist on %s: %w", cfg.Bind, err)
	}
	m.ml = ml
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
	limit := MetaLimit
	if m.leaving {
		limit -= len(appendLeaving(nil))
	}
	b, err := encodeMeta(m.meta, limit)
	if err != nil {
		return err
	}
	if m.leaving {
		b = appendLeaving(b)
	}
	m.metaBytes.Store(&b)
	return nil
}

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
		out = append(out, st.Member)
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

// Send sends env to the named member over TCP (memberlist SendReliable),
// after setting env.Schema and env.From (env is modified). It blocks for up
// to the profile's TCP timeout. Errors name the node and wrap
// ErrUnknownMember, ErrNotAlive, ErrClosed or ErrTooLarge where they apply.
func (m *Mesh) Send(node string, env *gwpb.Envelope) error {
	b, err := m.encode(env)
	if err != nil {
		return fmt.Errorf("send to %s: %w", node, err)
	}
	return m.sendBytes(node, b)
}

// SendToRole sends env (modified as by Send) to every alive member of role
// but this one, in parallel. It returns how many sends succeeded and the
// failures, joined. No such member is not an error: sent is 0.
func (m *Mesh) SendToRole(role gwpb.Role, env *gwpb.Envelope) (sent int, err error) {
	b, err := m.encode(env)
	if err != nil {
		return 0, fmt.Errorf("send to role %s: %w", role, err)
	}
	targets := m.AliveMembers(role)
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	sem := make(chan struct{}, sendParallel)
	for i, name := range targets {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = m.sendBytes(name, b)
		}()
	}
	wg.Wait()
	for _, e := range errs {
		if e == nil {
			sent++
		}
	}
	return sent, errors.Join(errs...)
}

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
	return true
}

// AliveMembers returns the names of the alive members of role but this
// one, sorted.
func (m *Mesh) AliveMembers(role gwpb.Role) []string {
	var names []string
	m.mu.Lock()
	for name, st := range m.members {
		if name != m.name && st.Status == StatusAlive && st.Role == role {
			names = append(names, name)
		}
	}
	m.mu.Unlock()
	slices.Sort(names)
	return names
}

func (m *Mesh) encode(env *gwpb.Envelope) ([]byte, error) {
	if env == nil {
		return nil, errors.New("nil envelope")
	}
	env.Schema = gwpb.SchemaVersion
	env.From = m.name
	return EncodeEnvelope(env)
}

func (m *Mesh) sendBytes(node string, b []byte) error {
	if m.closed(false) {
		return fmt.Errorf("send to %s: %w", node, ErrClosed)
	}
	m.mu.Lock()
	st := m.members[node]
	if st == nil {
		m.mu.Unlock()
		return fmt.Errorf("send to %s: %w", node, ErrUnknownMember)
	}
	to := memberlist.Node{Name: node, Addr: st.ip, Port: st.port}
	status, since, addr := st.Status, st.Since, st.Addr
	m.mu.Unlock()
	if status != StatusAlive {
		return fmt.Errorf("send to %s: %w (%s since %s)", node, ErrNotAlive, status, since.Format(time.RFC3339))
	}
	if err := m.ml.SendReliable(&to, b); err != nil {
		return fmt.Errorf("send to %s at %s: %w", node, addr, err)
	}
	return nil
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

// rejoinLoop runs joinSeeds about every interval (±20 %, so that a cluster
// started at once does not beat on the seeds in step) until stop.
func (m *Mesh) rejoinLoop(every time.Duration) {
	defer close(m.loopDone)
	jitter := func() time.Duration {
		return time.Duration(float64(every) * (0.8 + 0.4*rand.Float64()))
	}
	t := time.NewTimer(jitter())
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			if len(m.seeds) > 0 {
				m.joinSeeds()
			}
			if m.role == gwpb.Role_ROLE_AGGREGATOR {
				m.rejoinDead()
			}
			t.Reset(jitter())
		}
	}
}

// Bounds of rejoinDead.
const (
	// rejoinDeadFor is how long after a member's death an aggregator
	// keeps trying to join it.
	rejoinDeadFor = 10 * time.Minute
	// rejoinDeadMax bounds the members tried per round (in parallel).
	rejoinDeadMax = 16
)

// rejoinDead tries to join, directly, the members that died here in the
// last rejoinDeadFor (at most rejoinDeadMax of them per round, at random).
// After a partition heals, a member that was cut off may still hold the
// aggregator alive: its own rejoin loop then has no missing seed, and the
// aggregator forgot it GossipToTheDeadTime after its death, so nothing
// but the next push-pull between it and some healthy member would merge
// it back (every 30 s scaled by log2(N/32)+1: 3 min at 1,000 members). A
// member that is really gone costs one failed connect per round. Only
// aggregators do this: they are few, and they are who must see the node.
func (m *Mesh) rejoinDead() {
	now := time.Now()
	var addrs []string
	m.mu.Lock()
	for name, st := range m.members {
		if name != m.name && st.Status == StatusDead && st.Addr != "" && now.Sub(st.Since) < rejoinDeadFor {
			addrs = append(addrs, st.Addr)
		}
	}
	m.mu.Unlock()
	if len(addrs) == 0 {
		return
	}
	rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	addrs = addrs[:min(len(addrs), rejoinDeadMax)]
	var wg sync.WaitGroup
	for _, addr := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if m.stopped() {
				return
			}
			if n, err := m.ml.Join([]string{addr}); n > 0 {
				m.log.Info("rejoined a member that was dead", "addr", addr)
			} else {
				m.log.Debug("dead member still unreachable", "addr", addr, "err", flatten(err))
			}
		}()
	}
	wg.Wait()
}

// joinSeeds joins one seed that is not a live member here, trying them in
// random order until one answers. One successful push-pull merges two
// partitions; seeds that are live members cost nothing, so a healthy
// cluster does not load its seeds.
func (m *Mesh) joinSeeds() {
	missing := m.missingSeeds()
	if len(missing) == 0 {
		m.joined.Store(true)
		return
	}
	rand.Shuffle(len(missing), func(i, j int) { missing[i], missing[j] = missing[j], missing[i] })
	var errs []string
	for _, seed := range missing {
		if m.stopped() {
			return
		}
		n, err := m.ml.Join([]string{seed})
		if n > 0 {
			first := !m.joined.Swap(true)
			if m.joinFailing.Swap(false) || first {
				m.log.Info("joined the mesh", "seed", seed, "members", m.ml.NumMembers())
			}
			return
		}
		errs = append(errs, flatten(err).Error())
	}
	err := strings.Join(errs, "; ")
	if !m.joinFailing.Swap(true) {
		m.log.Warn("cannot join any seed; retrying", "seeds", missing, "err", err)
	} else {
		m.log.Debug("cannot join any seed", "seeds", missing, "err", err)
	}
}

// flatten turns memberlist's multierror (a multi-line message) into one
// line.
func flatten(err error) error {
	if err == nil {
		return errors.New("no answer")
	}
	me, ok := err.(interface{ WrappedErrors() []error })
	if !ok {
		return err
	}
	msgs := make([]string, 0, len(me.WrappedErrors()))
	for _, e := range me.WrappedErrors() {
		msgs = append(msgs, e.Error())
	}
	return errors.New(strings.Join(msgs, "; "))
}

// missingSeeds returns the seeds that are neither this member nor an alive
// member here. A seed that does not resolve counts as missing (Join logs
// why).
func (m *Mesh) missingSeeds() []string {
	have := make(map[string]bool)
	m.mu.Lock()
	for name, st := range m.members {
		if name == m.name || st.Status == StatusAlive {
			have[st.Addr] = true
		}
	}
	m.mu.Unlock()
	var missing []string
	for _, seed := range m.seeds {
		if !m.seedPresent(seed, have) {
			missing = append(missing, seed)
		}
	}
	return missing
}

func (m *Mesh) seedPresent(seed string, have map[string]bool) bool {
	host, port, err := net.SplitHostPort(seed)
	if err != nil {
		return false
	}
	var ips []net.IP
	if ip := net.ParseIP(host); ip != nil {
		ips = []net.IP{ip}
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
		addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
		cancel()
		if err != nil {
			return false
		}
		for _, a := range addrs {
			ips = append(ips, a.IP)
		}
	}
	for _, ip := range ips {
		if !have[net.JoinHostPort(ip.String(), port)] {
			return false
		}
	}
	return len(ips) > 0
}

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
	small, err := encodeMeta(d.m.meta, limit)
	if err != nil {
		d.m.log.Error("meta does not fit memberlist's limit", "limit", limit, "err", err)
		return nil
	}
	return small
}

// NotifyMsg decodes a direct message and hands it to the Handler.
func (d delegate) NotifyMsg(buf []byte) {
	b := bytes.Clone(buf) // memberlist reuses buf
	env, err := DecodeEnvelope(b)
	if err != nil {
		from := claimedSender(b)
		if from == "" {
			from = "unknown"
		}
		if ok, suppressed := d.m.badMsgs.allow(from, time.Now()); ok {
			d.m.log.Warn("dropped undecodable message", "from", from, "bytes", len(b), "err", err,
				"suppressed", suppressed)
		}
		return
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
	addr := net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
	var badMeta error
	m.mu.Lock()
	st := m.members[n.Name]
	isNew := st == nil
	if isNew {
		st = &memberState{Member: Member{Name: n.Name}}
		m.members[n.Name] = st
	}
	changed := isNew || st.Addr != addr
	st.ip, st.port, st.Addr = slices.Clone(n.Addr), n.Port, addr
	if isNew || !bytes.Equal(st.raw, n.Meta) {
		oldMeta, oldErr := st.Meta, st.MetaErr
		badMeta = m.decodeMemberMeta(st, n.Meta)
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
	mem := st.Member
	m.mu.Unlock()

	if badMeta != nil {
		m.log.Warn("undecodable member meta", "node", n.Name, "addr", addr, "bytes", len(n.Meta), "err", badMeta)
	}
	// Departures and returns matter to an operator; the first sight of
	// each member (thousands when an aggregator starts) does not.
	switch {
	case kind == eventLeave:
		m.log.Info("member gone", "node", mem.Name, "addr", addr, "status", string(mem.Status))
	case kind == eventJoin && (prev == StatusDead || prev == StatusLeft):
		m.log.Info("member back", "node", mem.Name, "addr", addr, "role", mem.Role.String(), "was", string(prev))
	case kind == eventJoin:
		m.log.Debug("member joined", "node", mem.Name, "addr", addr, "role", mem.Role.String())
	}
	if changed && m.handler != nil {
		m.handler.MemberChanged(mem)
	}
}

// decodeMemberMeta decodes a member's meta into st. It returns the decode
// error if it should be logged (once per node and meta value).
func (m *Mesh) decodeMemberMeta(st *memberState, raw []byte) error {
	st.raw = bytes.Clone(raw)
	st.Meta, st.MetaErr, st.Role, st.leaving = nil, nil, gwpb.Role_ROLE_UNSPECIFIED, false
	if len(raw) == 0 {
		return nil
	}
	meta, leaving, err := decodeMeta(raw)
	if err != nil {
		st.MetaErr = err
		if bytes.Equal(st.badMeta, raw) {
			return nil
		}
		st.badMeta = st.raw
		return err
	}
	st.Meta, st.Role, st.leaving = meta, knownRole(meta.GetRole()), leaving
	return nil
}
