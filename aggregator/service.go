package aggregator

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/hostinfo"
	"github.com/gracewatch/gracewatch/internal/metrics"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// Mesh is what the Service needs of the gossip layer. *mesh.Mesh implements
// it; FakeMesh is the test double.
type Mesh interface {
	// Members returns every member seen, this one included.
	Members() []mesh.Member
	// Send sends env to the named member; it may block for a network
	// timeout.
	Send(node string, env *gwpb.Envelope) error
	// Joined reports whether the first join has completed.
	Joined() bool
	// NumMembers returns the number of live members.
	NumMembers() int
}

var (
	_ Mesh         = (*mesh.Mesh)(nil)
	_ mesh.Handler = (*Service)(nil)
)

// Sentinel errors of Control.
var (
	ErrUnknownNode    = errors.New("unknown node")
	ErrUnreachable    = errors.New("node unreachable")
	ErrControlTimeout = errors.New("no answer from the agent")
	ErrNotRunning     = errors.New("aggregator not running")
	ErrSend           = errors.New("cannot reach the agent")
)

// AgentError is an agent's refusal of a Control (ControlAck.ok false).
type AgentError struct {
	Node string
	Msg  string
}

func (e *AgentError) Error() string { return fmt.Sprintf("agent on %s refused: %s", e.Node, e.Msg) }

// Defaults of Options.
const (
	DefaultControlTimeout   = 10 * time.Second
	DefaultHistory          = 4096
	DefaultSubscriberBuffer = 1024
	// joinRecheck is how often leadership is re-evaluated while the mesh
	// has not joined yet (the mesh tells no event when it does).
	joinRecheck = time.Second
)

// Options configure a Service.
type Options struct {
	// Name is this aggregator's member name.
	Name string
	// Policy is the view's policy.
	Policy Policy
	// Grace is the cluster's G, served by /v1/config.
	Grace time.Duration
	// Actuators run on transitions when this aggregator leads.
	Actuators []ActuatorConfig
	// MeshInsecure is reported by Ready (the mesh runs without encryption).
	MeshInsecure bool
	// Clock is the time source; nil is the wall clock.
	Clock clock.Clock
	// Logger receives the events; nil discards them.
	Logger *slog.Logger
	// ControlTimeout bounds the wait for an agent's ControlAck; 0 means
	// DefaultControlTimeout.
	ControlTimeout time.Duration
	// History is how many events are kept for Last-Event-ID resumption; 0
	// means DefaultHistory.
	History int
	// SubscriberBuffer is how many events a watcher may lag behind before
	// it is dropped; 0 means DefaultSubscriberBuffer.
	SubscriberBuffer int
	// ActuatorBackoff is the first retry delay of a failed actuator (it
	// doubles, up to a minute); 0 means one second.
	ActuatorBackoff time.Duration
	// StateDir, if set, is where the actuators keep the nodes gracewatch
	// drained (drained.json), so that a restarted aggregator still
	// undrains them. Empty: in memory only.
	StateDir string
	// Registry, if set, receives the Service's metrics
	// (gracewatch_aggregator_*; see metrics.go). Nil keeps them
	// unregistered.
	Registry prometheus.Registerer
	// Host, if set, gives the facts of the machine the aggregator runs on
	// (load, memory, uptime, state dir space; internal/hostinfo.Reader.Read,
	// through gopsutil) for /readyz and the state dir metrics. It must
	// return within a bounded time.
	Host metrics.HostFunc
}

// Service keeps what the mesh says about every node, serves the view derived
// from it, publishes the view's changes and relays administrators' actions
// to the agents.
//
// Its mesh callbacks (HandleMessage, MemberChanged) never block: they append
// to an unbounded queue that one goroutine, started by Run, drains in
// batches, recomputing the nodes each batch touched. A timer armed for the
// earliest time at which a node's view changes by time alone (a central
// deadline, the end of a gone member's Policy.UnreachableAfter) recomputes
// the nodes due when it fires; nothing polls. The read methods are safe for concurrent use.
type Service struct {
	opts  Options
	clock clock.Clock
	log   *slog.Logger
	epoch string // qualifies event ids: they are only meaningful here
	act   *actuators
	met   *serviceMetrics

	// The inbox: the callbacks append, the loop takes.
	inMu  sync.Mutex
	inbox []input
	wake  chan struct{}

	// Owned by the loop goroutine.
	inputs  map[string]*NodeInput
	enforce map[string]time.Time // nodes whose view time alone changes, and when
	// held: nodes first seen less than Policy.Settle ago, and when the
	// actuators hear of them. Until then gossip may be stale and the
	// other aggregators may not be known yet (a merge delivers members in
	// any order), so neither a drain nor an adoption is decided.
	held    map[string]time.Time
	aggs    map[string]mesh.Member
	timer   clock.Timer
	timerAt time.Time
	timerNo uint64 // generation of timer
	recheck clock.Timer
	leading bool
	// handoverTo: aggregators seen joining in this batch (see sendHandovers).
	handoverTo []string

	// Shared with readers.
	mu       sync.RWMutex
	mesh     Mesh
	view     map[string]Node
	names    []string // sorted keys of view
	seq      uint64
	history  []Event // ring, History long; event seq s is at (s-1) % len
	subs     map[*Subscription]struct{}
	waiters  map[string]*waiter
	leader   string
	aggInfo  []AggregatorInfo
	running  bool
	finished bool
}

type inputKind int

const (
	inMember inputKind = iota
	inMessage
	inTick
	inSync
	inForget
	inSeed
	inRecheck
)

type input struct {
	kind   inputKind
	member mesh.Member
	from   string
	env    *gwpb.Envelope
	done   chan struct{}
	gen    uint64 // of the deadline timer that sent an inTick
	forget string // inForget: the node; from: who asked
	reply  chan error
}

type waiter struct {
	node string
	ch   chan *gwpb.ControlAck
}

// Event is one change of a node's served state (any field of its summary).
type Event struct {
	// ID is "<epoch>-<seq>": seq counts this process's events from 1, and
	// epoch is random per process, so that an id given to another
	// aggregator, or to this one after a restart, is recognised as foreign
	// (and answered with a snapshot) instead of silently skipping events.
	ID   string
	Seq  uint64
	Node Node
	// Forgotten: the node Node.Name left the view (Service.Forget); the
	// watch sends a "forget" event.
	Forgotten bool
}

// AggregatorInfo is an aggregator member as /healthz lists it.
type AggregatorInfo struct {
	Name   string      `json:"name"`
	Status mesh.Status `json:"status"`
	Leader bool        `json:"leader"`
	Self   bool        `json:"self"`
}

// New returns a Service. Nothing runs until Run, but the mesh callbacks may
// be called at once: what they hand over waits in the queue.
func New(o Options) (*Service, error) {
	if o.Name == "" {
		return nil, errors.New("aggregator: empty name")
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ControlTimeout <= 0 {
		o.ControlTimeout = DefaultControlTimeout
	}
	if o.History <= 0 {
		o.History = DefaultHistory
	}
	if o.SubscriberBuffer <= 0 {
		o.SubscriberBuffer = DefaultSubscriberBuffer
	}
	if o.ActuatorBackoff <= 0 {
		o.ActuatorBackoff = time.Second
	}
	var rnd [4]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, fmt.Errorf("aggregator: event epoch: %w", err)
	}
	log := o.Logger.With("component", "aggregator")
	s := &Service{
		opts:    o,
		clock:   o.Clock,
		log:     log,
		epoch:   hex.EncodeToString(rnd[:]),
		wake:    make(chan struct{}, 1),
		inputs:  map[string]*NodeInput{},
		enforce: map[string]time.Time{},
		held:    map[string]time.Time{},
		aggs:    map[string]mesh.Member{},
		view:    map[string]Node{},
		history: make([]Event, o.History),
		subs:    map[*Subscription]struct{}{},
		waiters: map[string]*waiter{},
	}
	s.act = newActuators(o.Actuators, o.Clock, o.ActuatorBackoff, log)
	if o.StateDir != "" && len(o.Actuators) > 0 {
		if err := s.act.remember(o.StateDir); err != nil {
			return nil, fmt.Errorf("state_dir: %w", err)
		}
	}
	s.met = newServiceMetrics(s)
	s.act.onRun = s.met.actuatorRun
	if o.Registry != nil {
		for _, c := range s.met.collectors() {
			if err := o.Registry.Register(c); err != nil {
				return nil, fmt.Errorf("aggregator: metrics: %w", err)
			}
		}
	}
	s.aggInfo = []AggregatorInfo{{Name: o.Name, Status: mesh.StatusAlive, Self: true}}
	return s, nil
}

// Name returns this aggregator's member name.
func (s *Service) Name() string { return s.opts.Name }

// Grace returns the cluster's G.
func (s *Service) Grace() time.Duration { return s.opts.Grace }

// Policy returns the view's policy.
func (s *Service) Policy() Policy { return s.opts.Policy }

// HandleMessage implements mesh.Handler: it queues env and returns.
func (s *Service) HandleMessage(from string, env *gwpb.Envelope) {
	if env == nil {
		return
	}
	s.enqueue(input{kind: inMessage, from: from, env: env})
}

// MemberChanged implements mesh.Handler: it queues m and returns.
func (s *Service) MemberChanged(m mesh.Member) {
	s.enqueue(input{kind: inMember, member: m})
}

func (s *Service) enqueue(in input) {
	s.inMu.Lock()
	s.inbox = append(s.inbox, in)
	s.inMu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Sync waits until every input queued before the call has been processed
// (tests and benchmarks), or ctx ends. It needs Run.
func (s *Service) Sync(ctx context.Context) error {
	done := make(chan struct{})
	s.enqueue(input{kind: inSync, done: done})
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run processes the mesh's inputs until ctx ends, then stops the actuators
// (a running command is killed) and ends every watch subscription. It first
// loads the mesh's current member list. It blocks, and may be called once.
func (s *Service) Run(ctx context.Context, m Mesh) error {
	s.mu.Lock()
	if s.running || s.finished {
		s.mu.Unlock()
		return errors.New("aggregator: Run called twice")
	}
	s.running, s.mesh = true, m
	s.mu.Unlock()
	s.act.start(ctx)
	defer func() {
		s.act.stop()
		if s.timer != nil {
			s.timer.Stop()
		}
		if s.recheck != nil {
			s.recheck.Stop()
		}
		s.mu.Lock()
		s.running, s.finished = false, true
		for sub := range s.subs {
			s.dropLocked(sub)
		}
		s.mu.Unlock()
	}()

	s.enqueue(input{kind: inSeed})
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
		}
		s.inMu.Lock()
		batch := s.inbox
		s.inbox = nil
		s.inMu.Unlock()
		s.process(batch)
	}
}

// process applies one batch of inputs and publishes what changed.
func (s *Service) process(batch []input) {
	dirty := map[string]bool{}
	var acks []*gwpb.Envelope
	var syncs []chan struct{}
	membersChanged, ticked := false, false
	for _, in := range batch {
		switch in.kind {
		case inSeed:
			for _, m := range s.mesh.Members() {
				if s.applyMember(m, dirty) {
					membersChanged = true
				}
			}
			membersChanged = true
		case inMember:
			if s.applyMember(in.member, dirty) {
				membersChanged = true
			}
		case inMessage:
			if s.applyMessage(in.from, in.env, dirty) {
				acks = append(acks, in.env)
			}
		case inTick:
			// The current timer fired: re-arm it below even if
			// nothing is due (the wall clock may have stepped back
			// since it was armed). A replaced timer's tick is stale.
			if in.gen == s.timerNo {
				s.timer, ticked = nil, true
			}
			now := s.clock.Now()
			for _, due := range []map[string]time.Time{s.enforce, s.held} {
				for name, at := range due {
					if !now.Before(at) {
						dirty[name] = true
					}
				}
			}
		case inRecheck:
			s.recheck = nil
			membersChanged = true
		case inSync:
			syncs = append(syncs, in.done)
		case inForget:
			in.reply <- s.forget(in.forget, in.from, true)
		}
	}
	// Leadership first: a transition that comes in the same batch as a
	// change of leadership is the new leader's to actuate, not this
	// aggregator's under the leadership it had before the batch (an
	// aggregator that learns of a lower-named peer and of a node's down
	// in one batch does not drain it).
	if membersChanged {
		s.updateLeadership()
	}
	if len(dirty) > 0 {
		s.recompute(dirty)
	} else if ticked {
		s.armTimer(s.clock.Now())
	}
	if len(s.handoverTo) > 0 {
		s.sendHandovers(s.handoverTo)
		s.handoverTo = nil
	}
	for _, env := range acks {
		s.deliverAck(env.GetFrom(), env.GetAck())
	}
	for _, done := range syncs {
		close(done)
	}
}

// sendHandovers sends the gone agents this aggregator knows to each of the
// named aggregators, which it has just seen join (see handoverOf). It runs
// on the loop; the sends run on goroutines of their own.
func (s *Service) sendHandovers(to []string) {
	h := handoverOf(s.inputs)
	if len(h.GetGone()) == 0 {
		return
	}
	env := &gwpb.Envelope{Body: &gwpb.Envelope_Handover{Handover: h}}
	m := s.mesh
	for _, name := range to {
		go func() {
			if err := m.Send(name, env); err != nil {
				s.log.Warn("handover of gone nodes not delivered", "to", name, "nodes", len(h.GetGone()), "err", err)
				return
			}
			s.log.Info("gone nodes handed over", "to", name, "nodes", len(h.GetGone()))
		}()
	}
}

// applyMember records a member; it reports whether the aggregators changed.
func (s *Service) applyMember(m mesh.Member, dirty map[string]bool) bool {
	if m.Name == "" {
		return false
	}
	if m.Name == s.opts.Name || m.Role == gwpb.Role_ROLE_AGGREGATOR {
		if m.Name != s.opts.Name {
			prev, had := s.aggs[m.Name]
			s.aggs[m.Name] = m
			if m.Status == mesh.StatusAlive && (!had || prev.Status != mesh.StatusAlive) {
				s.handoverTo = append(s.handoverTo, m.Name)
			}
		}
		return true
	}
	in, known := s.inputs[m.Name]
	if !known && m.Role != gwpb.Role_ROLE_AGENT && m.MetaErr == nil {
		// Neither an agent nor unreadable: a role of a newer schema, or
		// a member that published no meta yet.
		return false
	}
	if !known {
		in = &NodeInput{Name: m.Name, FirstSeen: s.clock.Now()}
		s.inputs[m.Name] = in
	}
	in.Role, in.Status, in.StatusSince = m.Role, m.Status, m.Since
	in.Gossip, in.GossipErr = m.Meta, m.MetaErr
	dirty[m.Name] = true
	return false
}

// applyMessage records a direct message; it reports whether env is a
// ControlAck to deliver after the recomputation.
func (s *Service) applyMessage(from string, env *gwpb.Envelope, dirty map[string]bool) bool {
	if from == "" {
		from = env.GetFrom()
	}
	if from == s.opts.Name {
		return false
	}
	// Forget and Handover come from aggregators only. The sender need not
	// be a known aggregator yet: an aggregator hands over the moment it
	// sees this one join, and that message can overtake the member event
	// of the sender here. One known as an agent is refused.
	if env.GetForget() != nil || env.GetHandover() != nil {
		if in, agent := s.inputs[from]; agent && in.Role == gwpb.Role_ROLE_AGENT {
			s.log.Warn("forget or handover from an agent ignored", "from", from)
			return false
		}
	}
	if f := env.GetForget(); f != nil {
		s.applyForget(from, f)
		return false
	}
	if h := env.GetHandover(); h != nil {
		skip := func(name string) bool {
			_, agg := s.aggs[name]
			return agg || name == s.opts.Name || name == from
		}
		if n := adoptHandover(s.inputs, h, skip, dirty); n > 0 {
			s.log.Info("gone nodes learned from another aggregator", "from", from, "nodes", n)
		}
		return false
	}
	if _, isAgg := s.aggs[from]; isAgg {
		s.log.Debug("message from an aggregator ignored", "from", from)
		return false
	}
	switch body := env.GetBody().(type) {
	case *gwpb.Envelope_State:
		u := body.State
		if u.GetMeta() == nil {
			s.log.Warn("state update without meta ignored", "node", from)
			return false
		}
		in := s.nodeInput(from)
		if replacesUpdate(in.Update, u) {
			in.Update = u
		}
		if newer(u.GetMeta(), in.Direct) {
			in.Direct = u.GetMeta()
		}
		dirty[from] = true
	case *gwpb.Envelope_Ack:
		if m := body.Ack.GetMeta(); m != nil {
			in := s.nodeInput(from)
			if newer(m, in.Direct) {
				in.Direct = m
			}
			dirty[from] = true
		}
		env.From = from
		return true
	case *gwpb.Envelope_Control:
		s.log.Debug("control message to an aggregator ignored", "from", from)
	default:
		s.log.Debug("message of an unknown type ignored", "from", from)
	}
	return false
}

// replacesUpdate reports whether StateUpdate u replaces old. The agent's
// sends arrive in any order (it starts a newer one without waiting for an
// older one, and repeats one that seems lost): a newer (incarnation, seq)
// wins; of two of the same state, the one with the later report (a
// diagnosis adds a report without changing the state).
func replacesUpdate(old, u *gwpb.StateUpdate) bool {
	switch {
	case old == nil || newer(u.GetMeta(), old.GetMeta()):
		return true
	case newer(old.GetMeta(), u.GetMeta()):
		return false
	}
	return latestTaken(u) >= latestTaken(old)
}

// latestTaken is the taken_ms of u's latest report, 0 without one.
func latestTaken(u *gwpb.StateUpdate) int64 {
	var ms int64
	for _, r := range u.GetReports() {
		ms = max(ms, r.GetTakenMs())
	}
	return ms
}

// nodeInput returns the input of node, creating it for a node the mesh has
// not told about yet (a direct message may overtake the member event).
func (s *Service) nodeInput(node string) *NodeInput {
	in := s.inputs[node]
	if in == nil {
		in = &NodeInput{Name: node, Role: gwpb.Role_ROLE_AGENT, FirstSeen: s.clock.Now()}
		s.inputs[node] = in
	}
	return in
}

// recompute recomputes the dirty nodes, publishes their changes, tells the
// actuators and re-arms the deadline timer.
func (s *Service) recompute(dirty map[string]bool) {
	now := s.clock.Now()
	p := s.opts.Policy
	names := make([]string, 0, len(dirty))
	for name := range dirty {
		names = append(names, name)
	}
	sort.Strings(names)

	type change struct {
		node   Node
		prev   State
		prevR  string // the reason before
		first  bool
		cause  string
		in     *NodeInput
		prevAt time.Time // the enforcement time before this recomputation
	}
	var changes []change
	var released []string // nodes whose hold ended: the actuators hear of them now
	s.mu.Lock()
	added := false
	for _, name := range names {
		in := s.inputs[name]
		if in == nil { // forgotten (Service.Forget) after it was marked dirty
			continue
		}
		if at, ok := s.held[name]; ok && !now.Before(at) {
			delete(s.held, name)
			released = append(released, name)
		}
		n, cause := computeNodeCause(in, now, p)
		prevAt := s.enforce[name]
		if at, ok := nextEnforcement(in, now, p); ok {
			s.enforce[name] = at
		} else {
			delete(s.enforce, name)
		}
		prev, had := s.view[name]
		if had && sameNode(prev, n) {
			continue
		}
		s.view[name] = n
		if !had {
			added = true
			if at := settleEnd(in, p); now.Before(at) {
				s.held[name] = at
			}
		}
		s.publishLocked(n.Summary())
		changes = append(changes, change{n, prev.State, prev.Reason, !had, cause, in, prevAt})
	}
	if added {
		s.names = s.names[:0]
		for name := range s.view {
			s.names = append(s.names, name)
		}
		sort.Strings(s.names)
	}
	s.mu.Unlock()

	for _, c := range changes {
		if c.first || c.prev != c.node.State {
			if c.first {
				s.log.Info("node", "node", c.node.Name, "state", string(c.node.State), "reason", logText(c.node.Reason))
			} else {
				s.log.Info("node state changed", "node", c.node.Name, "from", string(c.prev), "state", string(c.node.State),
					"reason", logText(c.node.Reason))
				var d time.Time
				if c.node.State == StateDown {
					d, _ = violationDeadline(c.in, c.cause, c.prevAt, now, p)
				}
				s.met.transition(c.node.State, c.cause, d, now)
			}
			if _, held := s.held[c.node.Name]; !held {
				s.act.observe(c.node.Name, c.node.State, c.node.Reason, s.otherAggregatorAlive())
			}
		} else if c.node.State == StateDown && c.prevR != c.node.Reason {
			if _, held := s.held[c.node.Name]; !held {
				s.act.observe(c.node.Name, c.node.State, c.node.Reason, s.otherAggregatorAlive())
			}
		}
	}
	for _, name := range released {
		if n, ok := s.view[name]; ok {
			s.act.observe(name, n.State, n.Reason, s.otherAggregatorAlive())
		}
	}
	s.armTimer(now)
}

// sameNode reports whether a and b serve the same JSON.
func sameNode(a, b Node) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

// armTimer arms the one timer for the earliest time in s.enforce and
// s.held.
func (s *Service) armTimer(now time.Time) {
	var next time.Time
	for _, m := range []map[string]time.Time{s.enforce, s.held} {
		for _, at := range m {
			if next.IsZero() || at.Before(next) {
				next = at
			}
		}
	}
	if next.Equal(s.timerAt) && s.timer != nil {
		return
	}
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	s.timerAt = next
	if next.IsZero() {
		return
	}
	s.timerNo++
	gen := s.timerNo
	s.timer = s.clock.AfterFunc(next.Sub(now), func() { s.enqueue(input{kind: inTick, gen: gen}) })
}

// otherAggregatorAlive reports whether another aggregator is alive (and so
// leads, when this one does not).
func (s *Service) otherAggregatorAlive() bool {
	for _, m := range s.aggs {
		if !gone(m.Status) {
			return true
		}
	}
	return false
}

// updateLeadership recomputes which aggregator runs the actuators: the
// alive one with the lowest name, this one included, once the mesh has
// joined (before that this one may not know the others yet).
func (s *Service) updateLeadership() {
	names := []string{s.opts.Name}
	info := []AggregatorInfo{{Name: s.opts.Name, Status: mesh.StatusAlive, Self: true}}
	for name, m := range s.aggs {
		info = append(info, AggregatorInfo{Name: name, Status: m.Status})
		if !gone(m.Status) {
			names = append(names, name)
		}
	}
	leader := slices.Min(names)
	slices.SortFunc(info, func(a, b AggregatorInfo) int { return strings.Compare(a.Name, b.Name) })
	for i := range info {
		info[i].Leader = info[i].Name == leader
	}
	joined := s.mesh != nil && s.mesh.Joined()
	leading := leader == s.opts.Name && joined
	if leader == s.opts.Name && !joined && s.recheck == nil {
		s.recheck = s.clock.AfterFunc(joinRecheck, func() {
			s.enqueue(input{kind: inRecheck})
		})
	}
	if joined && s.recheck != nil {
		s.recheck.Stop()
		s.recheck = nil
	}
	if !joined && s.recheck != nil && leader != s.opts.Name {
		s.recheck.Stop()
		s.recheck = nil
	}

	s.mu.Lock()
	s.leader, s.aggInfo = leader, info
	s.mu.Unlock()
	if leading != s.leading {
		s.leading = leading
		s.log.Info("actuator leadership", "leader", leader, "self", leading)
		s.act.setLeader(leading, s.otherAggregatorAlive())
	}
}

// deliverAck hands an ack to the Control call waiting for it.
func (s *Service) deliverAck(from string, ack *gwpb.ControlAck) {
	s.mu.Lock()
	w := s.waiters[ack.GetId()]
	if w != nil && w.node == from {
		delete(s.waiters, ack.GetId())
	}
	s.mu.Unlock()
	switch {
	case w == nil:
		s.log.Debug("control ack without a waiting request (late or foreign)", "node", from, "id", ack.GetId())
	case w.node != from:
		s.log.Warn("control ack from the wrong node ignored", "node", from, "want", w.node, "id", ack.GetId())
	default:
		w.ch <- ack // buffered, one ack per waiter
	}
}

// Nodes returns every node's summary (no report detail), sorted by name.
func (s *Service) Nodes() []Node { return s.NodesIn("") }

// NodesIn returns the summaries of the nodes in state want (every node if
// want is empty), sorted by name. It filters before it copies: the
// scheduler's frequent question (which nodes are down?) touches 10,000
// nodes' states but copies only the few it returns.
func (s *Service) NodesIn(want State) []Node {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if want == "" {
		out := make([]Node, 0, len(s.names))
		for _, name := range s.names {
			out = append(out, s.view[name].Summary())
		}
		return out
	}
	out := []Node{} // an empty list, not null, in JSON
	for _, name := range s.names {
		if n := s.view[name]; n.State == want {
			out = append(out, n.Summary())
		}
	}
	return out
}

// Node returns one node with its report detail.
func (s *Service) Node(name string) (Node, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n, ok := s.view[name]
	return n, ok
}

// Aggregators returns the aggregator members known here, this one
// included, sorted by name, and the actuator leader's name.
func (s *Service) Aggregators() ([]AggregatorInfo, string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.aggInfo), s.leader
}

// Readiness is what /readyz reports.
type Readiness struct {
	Ready      bool   `json:"ready"`
	MeshJoined bool   `json:"mesh_joined"`
	Members    int    `json:"members"`
	Nodes      int    `json:"nodes"`
	Insecure   bool   `json:"insecure"`
	Detail     string `json:"detail"`
	// Host is the aggregator's machine (Options.Host); nil without it. It
	// does not decide readiness.
	Host *hostinfo.Facts `json:"host,omitempty"`
}

// Ready reports whether the Service runs and its mesh has joined, with the
// machine's facts when Options.Host is set (which bounds the time Ready
// blocks).
func (s *Service) Ready() Readiness {
	s.mu.RLock()
	m, running, nodes := s.mesh, s.running, len(s.view)
	s.mu.RUnlock()
	r := Readiness{Nodes: nodes, Insecure: s.opts.MeshInsecure}
	var detail []string
	switch {
	case !running:
		detail = append(detail, "not running")
	case m != nil:
		r.MeshJoined = m.Joined()
		r.Members = m.NumMembers()
		if !r.MeshJoined {
			detail = append(detail, "the mesh has not joined any seed yet")
		}
	}
	r.Ready = running && r.MeshJoined
	if r.Ready {
		detail = append(detail, "ready")
	}
	if r.Insecure {
		detail = append(detail, "the mesh runs insecure: gossip is neither encrypted nor authenticated")
	}
	r.Detail = strings.Join(detail, "; ")
	if s.opts.Host != nil {
		h := s.opts.Host(context.Background())
		r.Host = &h
	}
	return r
}

// Control asks node's agent to resume (clear its DOWN latch) or drain (latch
// it DOWN) and waits for its answer, at most Options.ControlTimeout or until
// ctx ends. It returns the node as served after the agent's answer. Errors:
// ErrUnknownNode, ErrUnreachable (the member is dead or left),
// ErrNotRunning, ErrSend (wrapped), ErrControlTimeout (wrapped), an
// *AgentError when the agent refused, or ctx's error. Safe for concurrent
// use; it blocks.
func (s *Service) Control(ctx context.Context, node string, action gwpb.Action, reason, by string) (Node, error) {
	return s.control(ctx, node, &gwpb.Control{Action: action, Reason: reason, By: by})
}

// RegisterJob registers job on node's agent (or moves the expiration of
// the job registered there) and waits for its answer, as Control does.
func (s *Service) RegisterJob(ctx context.Context, node string, job *gwpb.JobRegistration, by string) (Node, error) {
	return s.control(ctx, node, &gwpb.Control{Action: gwpb.Action_ACTION_REGISTER_JOB, Job: job, By: by})
}

// control sends c (its id set here) to node's agent and waits for the ack.
func (s *Service) control(ctx context.Context, node string, c *gwpb.Control) (Node, error) {
	action, reason, by := c.GetAction(), c.GetReason(), c.GetBy()
	s.mu.Lock()
	n, ok := s.view[node]
	m, running := s.mesh, s.running
	if !ok {
		s.mu.Unlock()
		return Node{}, fmt.Errorf("%w: %s", ErrUnknownNode, node)
	}
	if gone(n.Member) {
		s.mu.Unlock()
		return n, fmt.Errorf("%w: %s: %s", ErrUnreachable, node, n.Reason)
	}
	if !running || m == nil {
		s.mu.Unlock()
		return n, ErrNotRunning
	}
	var rnd [12]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		s.mu.Unlock()
		return n, err
	}
	id := hex.EncodeToString(rnd[:])
	w := &waiter{node: node, ch: make(chan *gwpb.ControlAck, 1)}
	s.waiters[id] = w
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.waiters, id)
		s.mu.Unlock()
	}()

	timedOut := make(chan struct{})
	t := s.clock.AfterFunc(s.opts.ControlTimeout, func() { close(timedOut) })
	defer t.Stop()
	log := s.log.With("node", node, "action", action.String(), "id", id, "by", by)
	log.Info("control sent", "reason", logText(reason), "job", logText(c.GetJob().GetJob()))
	c.Id = id
	env := &gwpb.Envelope{Body: &gwpb.Envelope_Control{Control: c}}
	if err := m.Send(node, env); err != nil {
		log.Warn("control not delivered", "err", err)
		return n, fmt.Errorf("%w: %v", ErrSend, err)
	}
	select {
	case ack := <-w.ch:
		if !ack.GetOk() {
			log.Warn("control refused by the agent", "err", ack.GetError())
			msg := ack.GetError()
			if msg == "" {
				msg = "no reason given"
			}
			return n, &AgentError{Node: node, Msg: msg}
		}
		log.Info("control acknowledged")
		n, _ = s.Node(node)
		return n, nil
	case <-timedOut:
		log.Warn("control timed out", "timeout", s.opts.ControlTimeout)
		return n, fmt.Errorf("%w on %s within %v", ErrControlTimeout, node, s.opts.ControlTimeout)
	case <-ctx.Done():
		return n, ctx.Err()
	}
}

// logText bounds a text from the network in a log line.
func logText(s string) string {
	const max = 512
	if len(s) <= max {
		return s
	}
	return strings.ToValidUTF8(s[:max], "") + "…"
}
