package actuate

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gracewatch/gracewatch/internal/hostlist"
)

// Batched actuator runs: an on="up" actuator whose command takes {nodes}
// runs once for every node that needs it within BatchDelay, with {nodes}
// the hostlist of them all ("n[1-20,33]"), instead of once per node: when
// an incident's shared cause clears, its hundreds of nodes resume in a few
// scontrol calls (Slurm's `scontrol update NodeName=HOSTLIST State=RESUME`
// takes a hostlist; packaging/examples/aggregator/slurm-actuator.sh).

const (
	// BatchDelay is how long a batched actuator gathers nodes before it
	// runs: the nodes of one incident come back within a second or two of
	// each other (their agents see their processes end together).
	BatchDelay = 2 * time.Second
	// maxBatchNodes bounds the nodes of one run; more run in several.
	maxBatchNodes = 1024
)

// IsBatch reports whether c takes a hostlist ({nodes}) instead of a node.
func IsBatch(c Config) bool {
	for _, arg := range c.Command {
		if strings.Contains(arg, "{nodes}") {
			return true
		}
	}
	return false
}

// batcher gathers the nodes of the batched actuators and runs them. Its
// waits and runs end with the actuators' context.
type batcher struct {
	a *Actuators

	mu      sync.Mutex
	pending map[string]*batch // by transition and actuator index
}

// batch is the nodes gathered for one actuator, and where each waits for
// the result.
type batch struct {
	on    string
	index int
	c     Config
	nodes []string
	done  []chan bool
}

func newBatcher(a *Actuators) *batcher {
	return &batcher{a: a, pending: map[string]*batch{}}
}

// run adds node to the batch of actuator c and waits for that batch's run
// (the reason is not passed: a batch has many). It has the signature of
// actuators.runWithRetries.
func (b *batcher) run(ctx context.Context, node, on, _ string, index int, c Config) bool {
	done := make(chan bool, 1)
	key := fmt.Sprintf("%s/%d", on, index)
	b.mu.Lock()
	bt := b.pending[key]
	if bt == nil {
		bt = &batch{on: on, index: index, c: c}
		b.pending[key] = bt
		b.a.clock.AfterFunc(BatchDelay, func() { b.flush(key) })
	}
	bt.nodes = append(bt.nodes, node)
	bt.done = append(bt.done, done)
	if len(bt.nodes) >= maxBatchNodes {
		delete(b.pending, key)
		b.start(bt)
	}
	b.mu.Unlock()
	select {
	case ok := <-done:
		return ok
	case <-ctx.Done():
		return false
	}
}

// flush runs the batch of key, if it was not run already.
func (b *batcher) flush(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if bt := b.pending[key]; bt != nil {
		delete(b.pending, key)
		if b.a.ctx.Err() != nil {
			for _, d := range bt.done {
				d <- false
			}
			return
		}
		b.start(bt)
	}
}

// start runs bt in a goroutine of the actuators; b.mu is held.
func (b *batcher) start(bt *batch) {
	b.a.wg.Add(1)
	go func() {
		defer b.a.wg.Done()
		ok := b.a.runBatch(bt)
		for _, d := range bt.done {
			d <- ok
		}
	}()
}

// runBatch runs one batch, retrying with back-off as runWithRetries does.
func (a *Actuators) runBatch(bt *batch) bool {
	a.mu.Lock()
	ctx := a.ctx
	a.mu.Unlock()
	hl, err := hostlist.Compress(bt.nodes)
	if err != nil {
		a.log.Error("batched actuator not run: the nodes make no hostlist", "transition", bt.on, "actuator", bt.index, "nodes", len(bt.nodes), "err", err)
		return false
	}
	r := strings.NewReplacer("{nodes}", hl)
	argv := make([]string, len(bt.c.Command))
	for i, arg := range bt.c.Command {
		argv[i] = r.Replace(arg)
	}
	return a.runRetrying(ctx, bt.c, bt.on, argv, func(ctx context.Context) (int, string, error) {
		return runCommandEnv(ctx, argv, bt.c.Timeout.D(), "GRACEWATCH_NODES="+hl, "GRACEWATCH_TRANSITION="+bt.on)
	}, a.log.With("nodes", hl, "count", len(bt.nodes), "transition", bt.on, "actuator", bt.index), "")
}

// gathering returns how many nodes wait for a batch to run (tests).
func (b *batcher) gathering() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, bt := range b.pending {
		n += len(bt.nodes)
	}
	return n
}

// Gathering is how many batches of nodes gather now.
func (a *Actuators) Gathering() int { return a.batches.gathering() }
