package actuate

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/incident"
	"github.com/gracewatch/gracewatch/aggregator/nodelog"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/nodename"
)

// MaxBackoff caps the exponential back-off between retries.
const MaxBackoff = time.Minute

// Actuators runs the [[actuator]] commands on transitions, when this
// aggregator leads. The rule, per node:
//
//   - the node is served down and gracewatch has not drained it: run every
//     on="down" actuator (once per transition into down: a failure, after
//     its retries, waits for the next transition);
//   - the node is served up and every on="down" actuator of its last down
//     succeeded here: run every on="up" actuator, so that gracewatch never
//     undrains what it did not drain.
//
// The memory of what was drained is in this process only. A transition
// seen while another aggregator leads is that leader's to actuate: when this
// one takes over, it adopts such a down node as drained (so it undrains it
// later) instead of running the commands a second time; so does a leader
// that takes over while another aggregator is alive (a restarted lowest
// name). Only a down that no leader can have handled (seen while no other
// aggregator was alive) is actuated on taking over; the commands should still be idempotent, as
// scontrol and flux resource drain are. The Service tells of a node it has
// just come to know only once Policy.Settle has passed, so that this
// decision is taken with the agent's own state and with the other
// aggregators known (a merge delivers the members in any order).
// Commands for one node run one at a time, in a goroutine per node.
type Actuators struct {
	down, up, reasons []Config
	clock             clock.Clock
	backoff           time.Duration
	log               *slog.Logger
	// Lines, if set, bounds the lines about one node (package aggregator/nodelog): its
	// runs, its failures. Set before the first observe.
	Lines *nodelog.Log
	// OnRun, if set, is told every run's transition and error (nil:
	// success), from the run's goroutine; it must not block. Set before
	// the first observe.
	OnRun func(on string, err error)

	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	leader bool
	nodes  map[string]*actNode
	// stateDir, if set, is where the drained nodes are kept across
	// restarts (drained.json); saved is what was written last.
	stateDir string
	saved    []string
	// saveErr is the last failed write of the drained set (nil once one
	// succeeds): shown by /readyz; onSaveError counts each failure.
	saveErr     error
	OnSaveError func()

	// The blast-radius limit (actuator_limit.go): limit, the slots of
	// the drains within its window, the known nodes it is a fraction of,
	// the administrators' confirmations of incidents and what each
	// covers, and the timer that lets held drains through when a slot
	// expires.
	limit      incident.Limit
	budget     incident.Budget
	known      int
	confirmed  map[uint64]*confirmation
	limitTimer clock.Timer
	heldCount  int
	heldLogged time.Time
	// onHeld, if set, is told the number of held drains whenever it may
	// have changed (under a.mu; it must not block).
	onHeld func(int)
	// batches gathers the nodes of the on="up" actuators that take a
	// hostlist ({nodes}; actuator_batch.go).
	batches *batcher
	// runs bounds the actuator commands running at once.
	runs chan struct{}
}

type actNode struct {
	state  view.State
	reason string
	// epDown and epUp count transitions into down and up; failedDown and
	// failedUp remember the episode whose actuators failed.
	epDown, epUp         uint64
	failedDown, failedUp uint64
	// drained: every on="down" actuator of the last down succeeded here,
	// and no on="up" one succeeded since.
	drained bool
	running bool
	// elsewhere: the last transition happened while another aggregator was
	// alive and this one did not lead, so the leader handled it.
	elsewhere bool
	// told is the reason the scheduler was last given for this down (by
	// the on=down or on=reason actuators), at toldAt; failedReason the one
	// whose on=reason actuators failed (not tried again).
	told, failedReason string
	toldAt             time.Time
	// info is what the Service says of the node beyond its state: its
	// incident, the drain reason's prefix naming it, whether its drain is
	// limited, and whether its DOWN is early by this aggregator's clock.
	info ActInfo
	// held: its drain waits for the blast-radius limit since heldAt;
	// admitted is the down episode whose drain took a slot (or needed
	// none).
	held     bool
	heldAt   time.Time
	admitted uint64
}

// ActInfo is what the Service tells the actuators of a node besides its
// served state and reason.
type ActInfo struct {
	// Incident is the node's incident (0: none) and Prefix the words that
	// name it at the start of the scheduler's reason ("incident 7
	// (lustre /scratch, 312 nodes)"; empty: none).
	Incident uint64
	Prefix   string
	// Limited: the drain counts against the blast-radius limit (every
	// down but an administrator's own drain).
	Limited bool
	// Early: a DOWN from a deadline that by this aggregator's clock has
	// not passed yet; it is not drained until it has (the Service tells
	// again then).
	Early bool
}

func New(cfgs []Config, clk clock.Clock, backoff time.Duration, log *slog.Logger) *Actuators {
	a := &Actuators{clock: clk, backoff: backoff, log: log.With("component", "actuator"), nodes: map[string]*actNode{},
		confirmed: map[uint64]*confirmation{}, runs: make(chan struct{}, maxConcurrentRuns)}
	for _, c := range cfgs {
		switch c.On {
		case OnDown:
			a.down = append(a.down, c)
		case OnUp:
			a.up = append(a.up, c)
		case OnReason:
			a.reasons = append(a.reasons, c)
		}
	}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.batches = newBatcher(a)
	return a
}

// Remember loads the nodes gracewatch drained from dir and keeps that file
// up to date from now on: a restarted aggregator then undrains a node that
// came back while it was away, and does not drain again one still down.
func (a *Actuators) Remember(dir string) error {
	names, invalid, err := LoadDrained(dir)
	if err != nil {
		return err
	}
	if len(invalid) > 0 {
		var quoted []string
		for _, name := range invalid[:min(len(invalid), 10)] {
			quoted = append(quoted, nodename.Quote(name))
		}
		a.log.Warn("invalid node names dropped from the drained set: no actuator runs for them; undrain them by hand if the scheduler knows them",
			"file", filepath.Join(dir, DrainedFile), "count", len(invalid), "names", strings.Join(quoted, ", "))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stateDir, a.saved = dir, names
	for _, name := range names {
		a.nodes[name] = &actNode{drained: true}
	}
	if len(names) > 0 {
		a.log.Info("remembered the nodes gracewatch drained", "nodes", len(names), "file", filepath.Join(dir, DrainedFile))
	}
	return nil
}

// Forget drops a node that left the view (Service.Forget) and its
// memory of a drain.
func (a *Actuators) Forget(node string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if n := a.nodes[node]; n != nil && !n.running {
		a.setHeldLocked(n, false, a.clock.Now())
		a.budget.Release(node)
		a.uncoverLocked(node)
		delete(a.nodes, node)
		a.saveLocked()
	}
}

// saveLocked writes the drained set if it changed; a.mu is held.
func (a *Actuators) saveLocked() {
	if a.stateDir == "" {
		return
	}
	var names []string
	for name, n := range a.nodes {
		if n.drained {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	if slices.Equal(names, a.saved) && a.saveErr == nil {
		return
	}
	if err := saveDrained(a.stateDir, names); err != nil {
		if a.saveErr == nil {
			a.log.Error("cannot save the drained nodes; a restart will forget them (retried at the next change)", "dir", a.stateDir, "err", err)
		}
		a.saveErr = err
		if a.OnSaveError != nil {
			a.OnSaveError()
		}
		return
	}
	if a.saveErr != nil {
		a.log.Info("the drained nodes are saved again", "dir", a.stateDir)
	}
	a.saved, a.saveErr = names, nil
}

// SaveError returns the last failed write of the drained set, nil once one
// succeeded.
func (a *Actuators) SaveError() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.saveErr
}

// Start ties the actuators' commands to ctx.
func (a *Actuators) Start(ctx context.Context) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ctx, a.cancel = context.WithCancel(ctx)
}

// Stop kills the running commands and waits for their goroutines.
func (a *Actuators) Stop() {
	a.mu.Lock()
	a.cancel()
	a.leader = false
	if a.limitTimer != nil {
		a.limitTimer.Stop()
		a.limitTimer = nil
	}
	a.mu.Unlock()
	a.wg.Wait()
}

// Observe records a node's new served state (called on every change of
// state, and at the end of the Service's settle hold of a node it has just
// come to know). othersAlive says another
// aggregator is alive: while this one does not lead, that one actuates the
// transition; and a node first seen already down while one is alive was
// that one's to drain.
func (a *Actuators) Observe(node string, st view.State, reason string, othersAlive bool, info ActInfo) {
	if len(a.down) == 0 {
		return
	}
	if err := nodename.Validate(node); err != nil {
		// The intake refuses such names; this is the second line.
		a.log.Error("actuators not run for an invalid node name", "node", nodename.Quote(node), "err", err)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.nodes[node]
	first := n == nil
	if first {
		n = &actNode{}
		a.nodes[node] = n
	}
	if st != view.StateDown {
		info = ActInfo{}
	}
	prevInfo := n.info
	n.info = info
	if st == n.state {
		if st == view.StateDown && (reason != n.reason || info != prevInfo) {
			// The reason follows the diagnosis: the scheduler's too.
			n.reason = reason
			a.kickLocked(node, n)
		}
		return
	}
	if n.state == view.StateDown {
		// Up or tearing down: back, its slot frees. Unreachable: not
		// back, it keeps its slot (its drain, if held, is not needed
		// while it is not served down).
		a.leaveDownLocked(node, n, st == view.StateUp || st == view.StateTeardown)
	}
	switch st {
	case view.StateDown:
		n.epDown++
	case view.StateUp:
		n.epUp++
	}
	n.state, n.reason = st, reason
	n.elsewhere = othersAlive && !a.leader
	if first && st == view.StateDown && othersAlive && a.leader {
		n.drained = true
		a.log.Info("adopted a node already down: a live peer led when it went down", "node", node)
		a.saveLocked()
	}
	a.kickLocked(node, n)
}

// SetLeader starts or stops acting; a new leader reconciles every node.
// othersAlive says another aggregator is alive as this one takes over: it
// (or one before it) led while this one was away or starting, so the nodes
// already down are adopted as drained rather than drained again.
func (a *Actuators) SetLeader(leader, othersAlive bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	gained := leader && !a.leader
	a.leader = leader
	if !leader {
		// The leader holds its own drains; this one holds none.
		now := a.clock.Now()
		for _, n := range a.nodes {
			a.setHeldLocked(n, false, now)
		}
		return
	}
	for name, n := range a.nodes {
		if gained && (n.elsewhere || othersAlive) && n.state == view.StateDown && !n.drained {
			// The previous leader drained it; take over its undrain.
			n.drained = true
			a.log.Info("adopted a down node the previous leader actuated", "node", name)
		}
		n.elsewhere = false
		a.kickLocked(name, n)
	}
	a.saveLocked()
}

// neededLocked returns the transition to actuate for n, if any.
func (a *Actuators) neededLocked(n *actNode) (string, uint64) {
	switch {
	case n.state == view.StateDown && !n.drained && n.failedDown != n.epDown:
		if n.info.Early {
			return "", 0 // the deadline has not passed here yet
		}
		return OnDown, n.epDown
	case n.state == view.StateUp && n.drained && len(a.up) > 0 && n.failedUp != n.epUp:
		return OnUp, n.epUp
	case n.state == view.StateDown && n.drained && len(a.reasons) > 0 && n.told != "" && schedulerReason(n.info.Prefix, n.reason) != n.told &&
		schedulerReason(n.info.Prefix, n.reason) != n.failedReason:
		return OnReason, n.epDown
	}
	return "", 0
}

func (a *Actuators) kickLocked(name string, n *actNode) {
	if n.running || !a.leader || a.ctx.Err() != nil {
		return
	}
	on, _ := a.neededLocked(n)
	if on == "" || (on == OnDown && !a.admitLocked(name, n)) {
		return
	}
	n.running = true
	a.Lines.Emit(a.log, slog.LevelDebug, name, "actuating", "node", name, "transition", on)
	a.wg.Add(1)
	go a.runNode(name, n)
}

// runNode actuates one node until nothing is needed.
func (a *Actuators) runNode(name string, n *actNode) {
	defer a.wg.Done()
	defer a.Lines.Emit(a.log, slog.LevelDebug, name, "actuated: nothing more to run for the node", "node", name)
	for {
		a.mu.Lock()
		on, ep := a.neededLocked(n)
		if on == "" || !a.leader || a.ctx.Err() != nil || (on == OnDown && !a.admitLocked(name, n)) {
			n.running = false
			a.mu.Unlock()
			return
		}
		reason, ctx := schedulerReason(n.info.Prefix, n.reason), a.ctx
		wait := time.Duration(0)
		if on == OnReason {
			wait = n.toldAt.Add(ReasonEvery).Sub(a.clock.Now())
		}
		a.mu.Unlock()
		if wait > 0 {
			// At most one reason update per ReasonEvery: the latest
			// reason goes when the wait is over.
			if !sleep(ctx, a.clock, wait) {
				a.mu.Lock()
				n.running = false
				a.mu.Unlock()
				return
			}
			continue
		}

		cfgs := a.down
		switch on {
		case OnUp:
			cfgs = a.up
		case OnReason:
			cfgs = a.reasons
		}
		ok := true
		for i, c := range cfgs {
			run := a.runWithRetries
			if IsBatch(c) {
				run = a.batches.run
			}
			if !run(ctx, name, on, reason, i, c) {
				ok = false
			}
		}

		a.mu.Lock()
		switch {
		case ok && on == OnDown:
			n.drained = true
			n.told, n.toldAt = reason, a.clock.Now()
		case ok && on == OnUp:
			n.drained = false
			n.told = ""
		case ok && on == OnReason:
			n.told, n.toldAt = reason, a.clock.Now()
		case on == OnReason:
			n.failedReason = reason
			a.Lines.Emit(a.log, slog.LevelError, name, "the on=reason actuators failed: the scheduler keeps the previous reason", "node", name)
		case on == OnDown:
			n.failedDown = ep
			a.releaseLocked(name)
			a.Lines.Emit(a.log, slog.LevelError, name, "not every on=down actuator succeeded: on=up will not run for this down", "node", name)
		default:
			n.failedUp = ep
		}
		a.saveLocked()
		a.mu.Unlock()
	}
}

// schedulerReason is the reason the scheduler is given for a node: its
// own, after the prefix that names its incident, if any ("incident 7
// (lustre /scratch, 312 nodes): job 1234 teardown exceeded ...").
func schedulerReason(prefix, reason string) string {
	if prefix == "" {
		return reason
	}
	return prefix + ": " + reason
}

// Busy reports whether a command runs or waits to be retried (tests).
func (a *Actuators) Busy() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, n := range a.nodes {
		if n.running {
			return true
		}
	}
	return false
}

// Drains reports whether an on="down" actuator is configured.
func (a *Actuators) Drains() bool { return len(a.down) > 0 }
