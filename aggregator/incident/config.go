package incident

import (
	"math"
	"time"

	"github.com/gracewatch/gracewatch/internal/config"
)

// Defaults of the blast-radius limit (docs/DESIGN.md §5b says why).
const (
	// DefaultLimitFraction: at most 10 % of the known nodes drained
	// within DefaultLimitWindow without an administrator. On a healthy
	// cluster hung teardowns drain a handful of nodes a day; a tenth of
	// the machine in ten minutes is far above that and far below what a
	// stepped clock, a gracewatch defect or one dead file system under
	// every node does (everything at once). Kubernetes' node lifecycle
	// controller draws the same line: once more than 55 % of a zone's
	// nodes are unhealthy (--unhealthy-zone-threshold) it slows evictions
	// from 0.1 node/s (--node-eviction-rate) to 0.01 (--secondary-node-
	// eviction-rate), and stops them in clusters of 50 nodes or fewer.
	// gracewatch holds earlier, because a drain stops the jobs' nodes
	// rather than moving pods, and lets an administrator confirm.
	DefaultLimitFraction = 0.1
	// DefaultLimitNodes is the floor: a cluster of under 50 nodes may
	// still drain 5 without asking (10 % of 20 nodes is 2, which one bad
	// job's nodes exceed).
	DefaultLimitNodes = 5
	// DefaultLimitWindow: a drain counts against the limit for 10 minutes
	// (or until its node comes back): a storm of a few minutes is held
	// whole; past it, the held drains go a limit's worth per window, as
	// Kubernetes' secondary rate lets evictions trickle.
	DefaultLimitWindow = 10 * time.Minute
)

// Config is the [incidents] table of the aggregator's configuration.
type Config struct {
	// Window is how long after its last join a windowed incident (a wait
	// channel, undiagnosed, no report, unreachable) takes new nodes; 0
	// or absent means DefaultWindow.
	Window config.Duration `toml:"window"`
	// AutoResume resumes the nodes of a shared, diagnosed incident (a file
	// system or a wait channel) by themselves, each once its agent has
	// verified it clean (every process of its violations gone) and at
	// least AutoResumeMinNodes-1 other nodes that hung on the cause with
	// it have cleared too (State.Resumable), whatever the agent's own
	// auto_resume: a shared external cause is not the node's fault. Off
	// by default, as the agent's auto_resume is "never": a site opts in.
	AutoResume bool `toml:"auto_resume"`
	// AutoResumeMinNodes is the number of nodes, the one resumed
	// included, whose word the auto-resume needs: 0 or absent means
	// MinResumeNodes (3), which is also the least, since one compromised
	// node must never be enough with the node resumed; a site that fears
	// k compromised nodes sets k+2. At most MaxGone.
	AutoResumeMinNodes int `toml:"auto_resume_min_nodes"`
	// LimitNodes and LimitFraction are the blast-radius limit: at most
	// max(LimitNodes, ⌊LimitFraction × known nodes⌋), and at least one,
	// nodes drained by the on="down" actuators within LimitWindow without
	// an administrator's confirmation. Both 0: no limit.
	LimitNodes    int             `toml:"drain_limit_nodes"`
	LimitFraction float64         `toml:"drain_limit_fraction"`
	LimitWindow   config.Duration `toml:"drain_limit_window"`
}

// DefaultConfig returns the defaults of Config.
func DefaultConfig() Config {
	return Config{
		Window:             config.Dur(DefaultWindow),
		AutoResumeMinNodes: MinResumeNodes,
		LimitNodes:         DefaultLimitNodes,
		LimitFraction:      DefaultLimitFraction,
		LimitWindow:        config.Dur(DefaultLimitWindow),
	}
}

// Validate checks c, whose keys are under prefix ("incidents") in the
// configuration file, and fills its defaults. Every problem is reported,
// each naming its key.
func (c *Config) Validate(prefix string) error {
	errs := config.Problems{Prefix: prefix}
	switch d := c.Window.D(); {
	case d == 0:
		c.Window = config.Dur(DefaultWindow)
	case d < 0 || d > 24*time.Hour:
		errs.Add("window", "want 0 (the default, %v) to 24h, got %v", DefaultWindow, d)
	}
	switch n := c.AutoResumeMinNodes; {
	case n == 0:
		c.AutoResumeMinNodes = MinResumeNodes
	case n < MinResumeNodes || n > MaxGone:
		errs.Add("auto_resume_min_nodes", "want 0 (the default, %d) or %d to %d (one compromised node and the node resumed are never enough), got %d",
			MinResumeNodes, MinResumeNodes, MaxGone, n)
	}
	if c.LimitNodes < 0 || c.LimitNodes > 1_000_000 {
		errs.Add("drain_limit_nodes", "want 0 to 1000000, got %d", c.LimitNodes)
	}
	if f := c.LimitFraction; math.IsNaN(f) || f < 0 || f > 1 {
		errs.Add("drain_limit_fraction", "want 0 to 1, got %v", f)
	}
	switch d := c.LimitWindow.D(); {
	case d == 0:
		c.LimitWindow = config.Dur(DefaultLimitWindow)
	case d < 0 || d > 7*24*time.Hour:
		errs.Add("drain_limit_window", "want 0 (the default, %v) to 168h, got %v", DefaultLimitWindow, d)
	}
	return errs.Err()
}

// ResumeMin is AutoResumeMinNodes, at least MinResumeNodes and at most
// MaxGone whatever was set.
func (c Config) ResumeMin() int { return min(max(c.AutoResumeMinNodes, MinResumeNodes), MaxGone) }

// window is Window or its default.
func (c Config) window() time.Duration {
	if c.Window.D() <= 0 {
		return DefaultWindow
	}
	return c.Window.D()
}

// Limit returns the blast-radius limit of c.
func (c Config) Limit() Limit {
	w := c.LimitWindow.D()
	if w <= 0 {
		w = DefaultLimitWindow
	}
	return Limit{Nodes: c.LimitNodes, Fraction: c.LimitFraction, Window: w}
}

// Limit is the blast-radius limit on drains: at most Of(known) nodes
// drained within Window without an administrator.
type Limit struct {
	Nodes    int
	Fraction float64
	Window   time.Duration
}

// Enabled reports whether l limits anything.
func (l Limit) Enabled() bool { return l.Nodes > 0 || l.Fraction > 0 }

// Of is the number of drains allowed within the window when known nodes
// are known: max(1, Nodes, ⌊Fraction × known⌋). At least one, so that the
// limit never delays the first drain.
func (l Limit) Of(known int) int {
	return max(1, l.Nodes, int(math.Floor(l.Fraction*float64(max(known, 0)))))
}

// Budget is the limit's ledger: the nodes drained within the window, each
// holding a slot from its drain until the window has passed or the node
// came back. It reads no clock (the time is passed in). Not safe for
// concurrent use: its owner locks.
type Budget struct {
	slots map[string]time.Time
}

// Take records node's drain at now.
func (b *Budget) Take(node string, now time.Time) {
	if b.slots == nil {
		b.slots = map[string]time.Time{}
	}
	b.slots[node] = now
}

// Release gives node's slot back (it came back, or its drain failed).
func (b *Budget) Release(node string) { delete(b.slots, node) }

// Used returns the slots held at now within window, forgetting older
// ones.
func (b *Budget) Used(now time.Time, window time.Duration) int {
	for node, at := range b.slots {
		if now.Sub(at) >= window {
			delete(b.slots, node)
		}
	}
	return len(b.slots)
}

// NextFree returns when the oldest slot held expires (zero when none is).
func (b *Budget) NextFree(window time.Duration) time.Time {
	var next time.Time
	for _, at := range b.slots {
		if t := at.Add(window); next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return next
}
