package aggregator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gracewatch/gracewatch/agent/report"
	"github.com/gracewatch/gracewatch/aggregator/actuate"
	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/historian"
	"github.com/gracewatch/gracewatch/aggregator/incidents"
	"github.com/gracewatch/gracewatch/aggregator/intake"
	aggmetrics "github.com/gracewatch/gracewatch/aggregator/metrics"
	"github.com/gracewatch/gracewatch/aggregator/modes"
	"github.com/gracewatch/gracewatch/aggregator/nodelog"
	"github.com/gracewatch/gracewatch/aggregator/probe"
	"github.com/gracewatch/gracewatch/aggregator/reach"
	"github.com/gracewatch/gracewatch/aggregator/relay"
	"github.com/gracewatch/gracewatch/aggregator/reservation"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/aggregator/watch"
	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/hostlist"
	"github.com/gracewatch/gracewatch/internal/nodename"
	"github.com/gracewatch/gracewatch/internal/opt"
	"github.com/gracewatch/gracewatch/internal/ratelog"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// Mesh is what the Service needs of the gossip layer. *mesh.Mesh implements
// it; aggregator/meshfake is the test double.
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
	act   *actuate.Actuators
	plan  *reservation.Planner // nil: reservations off
	met   *aggmetrics.Metrics
	inc   *incidents.Tracker
	hist  *historian.Historian // nil: off
	lines *nodelog.Log         // the lines about one node, within its budget
	relay *relay.Relay         // the Controls waiting for their ack
	// runCtx is Run's context (set before the loop starts).
	runCtx context.Context

	// The inbox: the callbacks append, the loop takes.
	inMu  sync.Mutex
	inbox []input
	wake  chan struct{}

	// Owned by the loop goroutine.
	inputs  map[string]*view.NodeInput
	enforce map[string]time.Time // nodes whose view time alone changes, and when
	// modes counts the nodes by their agents' mode (its own lock).
	modes *modes.Count
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
	refused    *nodelog.Once // the refused names told
	// strangers: the nodes this aggregator's mesh has not told of.
	strangers    *intake.Strangers
	unseenLogged time.Time
	// staleLog rate-limits the log of refused stale or implausible
	// messages (intake.go, reach.go), per node.
	staleLog *ratelog.Limiter
	// causeLogged: the nodes whose refused cause was logged, and when
	// (intakeLatch).
	causeLogged map[string]time.Time
	// probes: each node's probes and when the next is due (package
	// aggregator/probe); probeSem bounds those in flight.
	probes   *probe.Schedule
	probeSem chan struct{}
	// reach is where the nodes proved they are reached, kept under
	// state_dir for a restart (package aggregator/reach).
	reach *reach.Book
	done  chan struct{} // closed when Run ends

	// Shared with readers.
	mu       sync.RWMutex
	mesh     Mesh
	view     map[string]view.Node
	names    []string   // sorted keys of view
	watchers *watch.Hub // the events to the watchers, under mu
	leader   string
	aggInfo  []api.AggregatorInfo
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
	inProbe
)

type input struct {
	kind   inputKind
	member mesh.Member
	from   string
	env    *gwpb.Envelope
	at     time.Time // inMessage: when it arrived
	probe  probeResult
	done   chan struct{}
	gen    uint64 // of the deadline timer that sent an inTick
	forget string // inForget: the node; from: who asked
	reply  chan error
}

// New returns a Service. Nothing runs until Run, but the mesh callbacks may
// be called at once: what they hand over waits in the queue.
func New(o Options) (*Service, error) {
	if err := nodename.Validate(o.Name); err != nil {
		return nil, fmt.Errorf("aggregator: name: %w", err)
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	opt.Default(&o.ControlTimeout, DefaultControlTimeout)
	opt.Default(&o.History, DefaultHistory)
	opt.Default(&o.HistoryBytes, DefaultHistoryBytes)
	opt.Default(&o.SubscriberBuffer, DefaultSubscriberBuffer)
	opt.Default(&o.ActuatorBackoff, time.Second)
	if o.Policy.Observe {
		o.Actuators, o.Reservations.Command = nil, nil // observe mode: no actuator runs
	}
	var rnd [4]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, fmt.Errorf("aggregator: event epoch: %w", err)
	}
	log := o.Logger.With("component", "aggregator")
	var err error
	s := &Service{
		opts:        o,
		clock:       o.Clock,
		log:         log,
		wake:        make(chan struct{}, 1),
		inputs:      map[string]*view.NodeInput{},
		enforce:     map[string]time.Time{},
		held:        map[string]time.Time{},
		strangers:   intake.NewStrangers(),
		refused:     nodelog.NewOnce(maxRefusedLogged, refusedSummaryEvery),
		staleLog:    ratelog.New(staleLogEvery),
		causeLogged: map[string]time.Time{},
		probes:      probe.NewSchedule(o.Policy),
		probeSem:    make(chan struct{}, probe.MaxInFlight),
		done:        make(chan struct{}),
		aggs:        map[string]mesh.Member{},
		view:        map[string]view.Node{},
	}
	s.watchers = watch.NewHub(&s.mu, hex.EncodeToString(rnd[:]), watch.NewEventLog(o.History, o.HistoryBytes), o.SubscriberBuffer, s.watcherDropped)
	s.act = actuate.New(o.Actuators, o.Clock, o.ActuatorBackoff, log)
	s.act.SetLimit(o.Incidents.Limit())
	if o.StateDir != "" && len(o.Actuators) > 0 {
		if err := s.act.Remember(o.StateDir); err != nil {
			return nil, fmt.Errorf("state_dir: %w", err)
		}
	}
	if s.reach, err = reach.Open(o.StateDir, o.Clock, log); err != nil {
		log.Warn("where the nodes were reached: not all of it read; a restart asks only the nodes of it that were", "err", err)
	}
	if o.Reservations.Enabled() {
		s.plan, err = reservation.New(reservation.Options{
			Config:    o.Reservations,
			Scheduler: o.ReservationScheduler,
			Hostlists: reservation.Hostlists{Compress: hostlist.Compress, Expand: hostlist.Expand},
			Clock:     o.Clock,
			Logger:    o.Logger,
			Registry:  o.Registry,
		})
		if err != nil {
			return nil, fmt.Errorf("aggregator: reservations: %w", err)
		}
	}
	if o.TeardownHistory.Logger == nil {
		o.TeardownHistory.Logger = log
	}
	if s.hist, err = historian.Open(o.TeardownHistory, o.Clock, log); err != nil {
		return nil, fmt.Errorf("aggregator: %w", err)
	}
	s.met = aggmetrics.New(metricsSource{s}, o.Host)
	s.act.OnSaveError = s.met.StateWriteFailed
	s.act.OnRun = s.met.ActuatorRun
	s.lines = nodelog.New(o.Clock, s.met.LogSuppressed)
	s.act.Lines = s.lines
	s.relay = relay.New(o.Clock, o.ControlTimeout, log, s.lines)
	s.modes = modes.New(modes.Name(o.Policy.Observe), log, func() { s.met.LogSuppressed(nodelog.ScopeCluster) })
	s.inc = s.newIncidents()
	if o.Registry != nil {
		cs := s.met.Collectors()
		if s.hist != nil {
			cs = append(cs, aggmetrics.NewHistoryCollector(s.hist.Stats, o.Clock.Now))
		}
		for _, c := range cs {
			if err := o.Registry.Register(c); err != nil {
				s.hist.Close() // opened above: its files are not left open
				return nil, fmt.Errorf("aggregator: metrics: %w", err)
			}
		}
	}
	s.aggInfo = []api.AggregatorInfo{{Name: o.Name, Status: string(mesh.StatusAlive), Self: true}}
	return s, nil
}

// Name returns this aggregator's member name.
func (s *Service) Name() string { return s.opts.Name }

// Grace returns the cluster's G.
func (s *Service) Grace() time.Duration { return s.opts.Grace }

// Policy returns the view's policy.
func (s *Service) Policy() view.Policy { return s.opts.Policy }

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
	s.runCtx = ctx
	s.act.Start(ctx)
	planDone := make(chan struct{})
	if s.plan != nil {
		go func() { s.plan.Run(ctx); close(planDone) }()
	} else {
		close(planDone)
	}
	defer func() {
		close(s.done)
		defer s.hist.Close()
		s.act.Stop()
		<-planDone
		if s.timer != nil {
			s.timer.Stop()
		}
		if s.recheck != nil {
			s.recheck.Stop()
		}
		s.mu.Lock()
		s.running, s.finished = false, true
		s.watchers.EndLocked()
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
			s.askSaved()
		case inMember:
			if s.applyMember(in.member, dirty) {
				membersChanged = true
			}
		case inMessage:
			if s.applyMessage(in.from, in.env, in.at, dirty) {
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
			for _, due := range []map[string]time.Time{s.enforce, s.held, s.probes.Due()} {
				for name, at := range due {
					if !now.Before(at) {
						dirty[name] = true
					}
				}
			}
		case inRecheck:
			s.recheck = nil
			membersChanged = true
		case inProbe:
			if s.probed(in.probe) {
				dirty[in.probe.node] = true
			}
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
		s.autoResume(s.clock.Now()) // a new leader resumes what is clean
	}
	if len(dirty) > 0 {
		s.recompute(dirty)
	} else if ticked {
		now := s.clock.Now()
		s.modes.LogMixed(now) // a line its bound held back may be due
		s.armTimer(now)
	}
	if len(s.handoverTo) > 0 {
		s.sendHandovers(s.handoverTo)
		s.handoverTo = nil
	}
	for _, env := range acks {
		s.relay.Deliver(env.GetFrom(), env.GetAck())
	}
	for _, done := range syncs {
		close(done)
	}
}

// Nodes returns every node's summary (no report detail), sorted by name.
func (s *Service) Nodes() []view.Node { return s.NodesIn("") }

// NodesIn returns the summaries of the nodes in state want (every node if
// want is empty), sorted by name. It filters before it copies: the
// scheduler's frequent question (which nodes are down?) touches 10,000
// nodes' states but copies only the few it returns.
func (s *Service) NodesIn(want view.State) []view.Node {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if want == "" {
		out := make([]view.Node, 0, len(s.names))
		for _, name := range s.names {
			out = append(out, s.view[name].Summary())
		}
		return out
	}
	out := []view.Node{} // an empty list, not null, in JSON
	for _, name := range s.names {
		if n := s.view[name]; n.State == want {
			out = append(out, n.Summary())
		}
	}
	return out
}

// Node returns one node with its report detail.
func (s *Service) Node(name string) (view.Node, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n, ok := s.view[name]
	return n, ok
}

// Aggregators returns the aggregator members known here, this one
// included, sorted by name, and the actuator leader's name.
func (s *Service) Aggregators() ([]api.AggregatorInfo, string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.aggInfo), s.leader
}

// Ready reports whether the Service runs and its mesh has joined, with the
// machine's facts when Options.Host is set (which bounds the time Ready
// blocks).
func (s *Service) Ready() api.Readiness {
	s.mu.RLock()
	m, running, nodes := s.mesh, s.running, len(s.view)
	s.mu.RUnlock()
	r := api.Readiness{Nodes: nodes, Insecure: s.opts.MeshInsecure, NodeRestriction: s.opts.ProvenOnly}
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
	if err := s.act.SaveError(); err != nil {
		r.StateWriteError = err.Error()
		detail = append(detail, "cannot save the drained nodes under state_dir (a restart would forget them): "+r.StateWriteError)
	}
	if s.plan != nil {
		if st := s.plan.Status(); st.Error != "" {
			detail = append(detail, "the scheduler's reservations may be stale: "+st.Error)
		}
	}
	s.incidentReadiness(&r, &detail)
	s.modeReadiness(&r, &detail)
	if !r.NodeRestriction {
		detail = append(detail, "node restriction is off (mesh.allow_unsigned, or an insecure mesh without mesh.site_key_file): anyone with the mesh key can speak for a node that has no node key")
	}
	r.Detail = strings.Join(detail, "; ")
	if s.opts.Host != nil {
		h := s.opts.Host(context.Background())
		r.Host = (*report.HostFacts)(&h)
	}
	return r
}
