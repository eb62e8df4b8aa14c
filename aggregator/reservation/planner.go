// Package reservation puts what gracewatch knows of a teardown into the
// scheduler's own plan (docs/DESIGN.md, "The scheduler's plan"): while
// nodes tear down, the leading aggregator keeps reservations in the
// scheduler that hold them until their free_at, moves them when free_at
// moves, and ends them the moment the nodes are up again (or down: the
// drain takes over). A backfilling scheduler otherwise plans such a node at
// "now" again at every pass, and holds the other nodes of a large pending
// job idle for it.
//
// Nodes whose free_at lie within a window share one reservation (the nodes
// of one job: one command for a thousand nodes), commands are batched into
// rounds at most Interval apart, and the scheduler's refusals are narrowed
// down (a reservation it refuses is split in halves, a node it refuses alone
// is quarantined) so that one unknown node does not keep the others out of
// the plan. Only reservations whose names begin with the prefix are ever
// touched; a new leader lists them and adopts or removes them; and each ends
// by itself at its free_at, so none outlives its teardown for long even if
// no aggregator is left to delete it.
package reservation

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/runcmd"
)

// Back-off of the planner after a failed command, and of a node the
// scheduler refused alone.
const (
	minBackoff     = time.Second
	maxBackoff     = time.Minute
	quarantineBase = time.Minute
	maxQuarantine  = 15 * time.Minute
)

// Options configure a Planner.
type Options struct {
	Config Config
	// Scheduler, nil: a Command running Config.Command.
	Scheduler Scheduler
	// Hostlists compress and expand node lists (for the Command and the
	// log).
	Hostlists Hostlists
	// Clock is the time source; nil is the wall clock.
	Clock clock.Clock
	// Logger receives the events; nil discards them.
	Logger *slog.Logger
	// Registry, if set, receives the metrics
	// (gracewatch_aggregator_reservation*).
	Registry prometheus.Registerer
}

// Status is what the planner holds, for /v1/reservations and /readyz.
type Status struct {
	// Leader: this aggregator keeps the reservations.
	Leader bool
	// Reservations are the scheduler's reservations of gracewatch as this
	// leader last knew them (none when it does not lead), sorted by name.
	Reservations []Reservation
	// Error is the last command that failed, until a round succeeds;
	// ErrorAt when.
	Error   string
	ErrorAt time.Time
}

// Planner keeps the reservations. Observe, Forget and SetLeader never
// block (the Service calls them from its loop); Run does the work in one
// goroutine. Safe for concurrent use.
type Planner struct {
	cfg       Config
	rules     rules
	sched     Scheduler
	hostlists Hostlists
	clock     clock.Clock
	log       *slog.Logger
	met       *metrics
	wake      chan struct{}

	mu     sync.Mutex
	nodes  map[string]Node // the nodes tearing down
	leader bool
	lead   uint64 // counts changes of leadership
	status Status

	// Owned by Run's goroutine.
	have      []Reservation
	listed    bool
	listedAt  time.Time
	hints     hints
	backoff   time.Duration
	notBefore time.Time
	timer     clock.Timer
	timerAt   time.Time
}

// New returns a Planner for o.Config (validated, Enabled). Nothing runs
// until Run.
func New(o Options) (*Planner, error) {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Scheduler == nil {
		o.Scheduler = &Command{Argv: o.Config.Command, Prefix: o.Config.Prefix, Timeout: o.Config.Timeout.D(), Hostlists: o.Hostlists}
	}
	p := &Planner{
		cfg:       o.Config,
		rules:     o.Config.rules(),
		sched:     o.Scheduler,
		hostlists: o.Hostlists,
		clock:     o.Clock,
		log:       o.Logger.With("component", "reservations"),
		wake:      make(chan struct{}, 1),
		nodes:     map[string]Node{},
		hints:     newHints(),
	}
	p.met = newMetrics(p)
	if o.Registry != nil {
		for _, c := range p.met.collectors() {
			if err := o.Registry.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

func (p *Planner) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Observe tells the planner a node's served state (on every change).
func (p *Planner) Observe(n Node) {
	p.mu.Lock()
	_, was := p.nodes[n.Name]
	if n.Tearing {
		p.nodes[n.Name] = n
	} else {
		delete(p.nodes, n.Name)
	}
	p.mu.Unlock()
	if was || n.Tearing {
		p.poke()
	}
}

// Forget drops a node that left the view.
func (p *Planner) Forget(name string) { p.Observe(Node{Name: name}) }

// SetLeader tells the planner whether this aggregator leads. A new leader
// lists the reservations before it changes any; one that stops leading
// forgets them (the new leader adopts them).
func (p *Planner) SetLeader(leading bool) {
	p.mu.Lock()
	if p.leader != leading {
		p.leader = leading
		p.lead++
	}
	p.mu.Unlock()
	p.poke()
}

// Status returns what the planner holds.
func (p *Planner) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.status
	s.Reservations = slices.Clone(s.Reservations)
	return s
}

// Run keeps the reservations until ctx ends. It blocks; call it once.
func (p *Planner) Run(ctx context.Context) {
	defer func() {
		if p.timer != nil {
			p.timer.Stop()
		}
	}()
	p.poke()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		}
		p.round(ctx)
	}
}

// leading reports whether this aggregator still leads in generation gen.
func (p *Planner) leading(gen uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.leader && p.lead == gen
}

// round lists when needed, plans, and runs up to MaxCommands commands.
func (p *Planner) round(ctx context.Context) {
	now := p.clock.Now()
	p.mu.Lock()
	leader, gen := p.leader, p.lead
	nodes := maps.Clone(p.nodes)
	p.mu.Unlock()
	if !leader {
		p.have, p.listed, p.backoff, p.notBefore = nil, false, 0, time.Time{}
		p.arm(time.Time{})
		p.publish(false, "", time.Time{})
		return
	}
	if now.Before(p.notBefore) {
		p.arm(p.notBefore)
		return
	}
	if !p.listed || !now.Before(p.listedAt.Add(Resync)) {
		list, err := p.sched.List(ctx)
		p.met.command(verbList, err)
		if err != nil {
			p.fail(now, "cannot list the reservations; nothing is changed until a list succeeds", err)
			return
		}
		// Never gracewatch's to touch, whatever the command listed.
		list = slices.DeleteFunc(list, func(r Reservation) bool { return !strings.HasPrefix(r.Name, p.cfg.Prefix) })
		if !p.listed && len(list) > 0 {
			p.log.Info("reservations found in the scheduler: adopted, kept or removed as the view calls for", "count", len(list), "names", names(list))
		}
		p.have, p.listed, p.listedAt = list, true, now
	}

	p.hints.prune(nodes)
	want, wake := plan(planInput{now: now, rules: p.rules, nodes: nodes, have: p.have, hints: p.hints, newName: p.newName})
	ops := diff(now, p.have, want)
	more := len(ops) > MaxCommands
	if more {
		ops = ops[:MaxCommands]
	}
	var failed error
	for _, o := range ops {
		if ctx.Err() != nil || !p.leading(gen) {
			more = true
			break
		}
		if err := p.apply(ctx, o); err != nil && failed == nil {
			failed = err
		}
	}
	now = p.clock.Now()
	if failed != nil {
		// What failed may have been done (a command that timed out):
		// the next round lists first.
		p.fail(now, "a reservation command failed; retried after a list", failed)
		return
	}
	p.backoff = 0
	p.notBefore = now.Add(p.cfg.Interval.D())
	next := p.listedAt.Add(Resync)
	if more {
		next = p.notBefore
	} else if !wake.IsZero() && wake.Before(next) {
		next = wake
	}
	p.arm(next)
	p.publish(true, "", time.Time{})
}

// fail backs off after a failed command.
func (p *Planner) fail(now time.Time, msg string, err error) {
	p.backoff = min(max(2*p.backoff, minBackoff), maxBackoff)
	p.notBefore = now.Add(p.backoff)
	p.listed = false
	p.log.Warn(msg, "err", err, "retry_in", p.backoff)
	p.arm(p.notBefore)
	p.publish(true, err.Error(), now)
}

// apply runs one command and records what it did, or what its failure
// teaches.
func (p *Planner) apply(ctx context.Context, o op) error {
	var err error
	switch o.verb {
	case verbCreate:
		err = p.sched.Create(ctx, o.res)
	case verbUpdate:
		err = p.sched.Update(ctx, o.res)
	case verbDelete:
		err = p.sched.Delete(ctx, o.res.Name)
	}
	p.met.command(o.verb, err)
	log := p.log.With("reservation", o.res.Name, "verb", string(o.verb))
	if o.verb != verbDelete {
		log = log.With("nodes", p.hostlist(o.res.Nodes), "count", len(o.res.Nodes), "end", o.res.End.UTC().Format(time.RFC3339))
	}
	if err == nil {
		p.record(o)
		log.Info("reservation " + string(o.verb) + "d")
		return nil
	}
	now := p.clock.Now()
	switch o.verb {
	case verbCreate:
		if len(o.res.Nodes) > 1 {
			for _, n := range o.res.Nodes {
				if m, ok := p.hints.maxGroup[n]; !ok || len(o.res.Nodes)/2 < m {
					p.hints.maxGroup[n] = len(o.res.Nodes) / 2
				}
			}
			log.Warn("the scheduler refused a reservation: it is tried again in halves", "err", err)
			break
		}
		n := o.res.Nodes[0]
		p.hints.failures[n]++
		q := min(quarantineBase<<min(p.hints.failures[n]-1, 10), maxQuarantine)
		p.hints.quarantine[n] = now.Add(q)
		log.Warn("the scheduler refused to reserve this node alone: not tried again for a while", "node", n, "retry_in", q, "err", err)
	case verbUpdate:
		for _, n := range o.added {
			p.hints.noJoin[n] = true
			if m, ok := p.hints.maxGroup[n]; !ok || max(1, len(o.added)/2) < m {
				p.hints.maxGroup[n] = max(1, len(o.added)/2)
			}
		}
		log.Warn("the scheduler refused to change a reservation", "err", err)
	default:
		log.Warn("the scheduler refused to delete a reservation", "err", err)
	}
	return err
}

// record applies a successful command to p.have and clears the hints it
// proves wrong.
func (p *Planner) record(o op) {
	i := slices.IndexFunc(p.have, func(r Reservation) bool { return r.Name == o.res.Name })
	switch {
	case o.verb == verbDelete && i >= 0:
		p.have = slices.Delete(p.have, i, i+1)
	case o.verb == verbDelete:
	case i >= 0:
		p.have[i] = clone(o.res)
	default:
		p.have = append(p.have, clone(o.res))
	}
	if o.verb == verbCreate {
		for _, n := range o.res.Nodes {
			delete(p.hints.maxGroup, n)
			delete(p.hints.failures, n)
			delete(p.hints.noJoin, n)
		}
	}
	for _, n := range o.added {
		delete(p.hints.noJoin, n)
	}
}

// arm sets the one timer for at (zero: none).
func (p *Planner) arm(at time.Time) {
	if p.timer != nil && at.Equal(p.timerAt) {
		return
	}
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	p.timerAt = at
	if at.IsZero() {
		return
	}
	p.timer = p.clock.AfterFunc(max(at.Sub(p.clock.Now()), 0), p.poke)
}

// publish updates the status the readers see.
func (p *Planner) publish(leader bool, errText string, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.status.Leader = leader
	p.status.Reservations = nil
	if leader {
		now := p.clock.Now()
		for _, r := range p.have {
			if r.End.After(now) {
				p.status.Reservations = append(p.status.Reservations, clone(r))
			}
		}
		slices.SortFunc(p.status.Reservations, func(a, b Reservation) int { return strings.Compare(a.Name, b.Name) })
	}
	p.status.Error, p.status.ErrorAt = errText, at
}

// newName returns a name no reservation of p.have bears.
func (p *Planner) newName() string {
	for {
		var b [4]byte
		rand.Read(b[:])
		name := p.cfg.Prefix + hex.EncodeToString(b[:])
		if !slices.ContainsFunc(p.have, func(r Reservation) bool { return r.Name == name }) {
			return name
		}
	}
}

// hostlist is nodes as a hostlist, for the log.
func (p *Planner) hostlist(nodes []string) string {
	if p.hostlists.Compress != nil {
		if hl, err := p.hostlists.Compress(nodes); err == nil {
			if len(hl) > 512 {
				hl = hl[:512] + "..."
			}
			return hl
		}
	}
	if len(nodes) > 8 {
		return nodes[0] + ",...," + nodes[len(nodes)-1]
	}
	return strings.Join(nodes, ",")
}

func names(list []Reservation) []string {
	out := make([]string, 0, min(len(list), 20))
	for _, r := range list[:min(len(list), 20)] {
		out = append(out, r.Name)
	}
	return out
}

// metrics are the planner's gracewatch_aggregator_reservation* metrics.
type metrics struct {
	commands *prometheus.CounterVec
	gauges   []prometheus.Collector
}

func newMetrics(p *Planner) *metrics {
	m := &metrics{
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gracewatch", Subsystem: "aggregator", Name: "reservation_commands_total",
			Help: "Runs of the reservation command, by verb (list, create, update, delete) and result (success, failure, timeout).",
		}, []string{"verb", "result"}),
	}
	for _, v := range []verb{verbList, verbCreate, verbUpdate, verbDelete} {
		for _, r := range []string{"success", "failure", "timeout"} {
			m.commands.WithLabelValues(string(v), r)
		}
	}
	gauge := func(name, help string, f func(Status) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "gracewatch", Subsystem: "aggregator", Name: name, Help: help},
			func() float64 { return f(p.Status()) })
	}
	m.gauges = []prometheus.Collector{
		gauge("reservations", "Reservations this aggregator keeps in the scheduler (0 unless it leads).",
			func(s Status) float64 { return float64(len(s.Reservations)) }),
		gauge("reserved_nodes", "Nodes held by the reservations this aggregator keeps.", func(s Status) float64 {
			n := 0
			for _, r := range s.Reservations {
				n += len(r.Nodes)
			}
			return float64(n)
		}),
		gauge("reservations_failing", "1 while the last reservation command failed (the scheduler's plan may be stale), else 0.",
			func(s Status) float64 {
				if s.Error != "" {
					return 1
				}
				return 0
			}),
	}
	return m
}

func (m *metrics) collectors() []prometheus.Collector {
	return append([]prometheus.Collector{m.commands}, m.gauges...)
}

func (m *metrics) command(v verb, err error) {
	result := "success"
	switch {
	case err == nil:
	case errors.Is(err, runcmd.ErrTimedOut):
		result = "timeout"
	default:
		result = "failure"
	}
	m.commands.WithLabelValues(string(v), result).Inc()
}
