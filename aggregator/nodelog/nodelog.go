package nodelog

// The bound of the log lines that the nodes' input can cause (docs/DESIGN.md
// §6): every line about one node, whatever its kind (its state, its clock,
// its incident, its actuators, a message of its refused), takes from that
// node's budget; the lines about the cluster as a whole that the nodes
// change (its modes) are spaced apart (package aggregator/modes). What is held back is
// counted in gracewatch_aggregator_log_lines_suppressed_total{scope} and
// reported, as "suppressed", with the node's next line.

import (
	"context"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/ratelog"
)

const (
	// NodeLogLines is how many lines one node's input may cause per
	// nodeLogEvery. A real hang takes a few: the node's change of state,
	// its incident's opening, its clock, its actuators' runs (six
	// attempts of a failing one); a node that flips its mode, clock and
	// cause in every update is held to it.
	NodeLogLines = 20
	// NodeDebugLines is the same for the debug lines, a budget of their
	// own: with log_level = "debug" a node's trace (its settle, each
	// actuator step) must not use up the lines of its state and actions.
	NodeDebugLines = 200
	// NodeLogEvery is the interval of nodeLogLines.
	NodeLogEvery = time.Minute
	// maxNodeLogKeys bounds the nodes whose budget is remembered: the
	// mesh's member table holds as many (16,384), and past it the nodes
	// whose minute is over are forgotten first (ratelog.Budget).
	maxNodeLogKeys = 16384
	// ClusterLogEvery spaces the lines about the cluster as a whole that
	// the nodes' input changes (mixed modes, one mode again).
	ClusterLogEvery = time.Minute
)

// The scopes of gracewatch_aggregator_log_lines_suppressed_total.
const (
	ScopeNode    = "node"
	ScopeCluster = "cluster"
)

// Log writes the lines about one node within that node's budget. Safe
// for concurrent use (the actuators' goroutines use it); a nil *Log
// writes every line.
type Log struct {
	budget *ratelog.Budget // info and above
	debug  *ratelog.Budget // below info
	clock  clock.Clock
	// held counts a line held back (the metric); it must not block.
	held func(scope string)
}

// New returns a Log of the budgets above on clk; held, if set, is told the
// scope of every line held back and must not block.
func New(clk clock.Clock, held func(scope string)) *Log {
	return &Log{budget: ratelog.NewBudget(NodeLogLines, NodeLogEvery, maxNodeLogKeys),
		debug: ratelog.NewBudget(NodeDebugLines, NodeLogEvery, maxNodeLogKeys), clock: clk, held: held}
}

// allow takes one line of level from node's budget of such lines (info
// and above, or debug): whether it may be written, and how many of node's
// lines were held back since its last one. The caller writes the count as
// "suppressed" when it is not 0.
func (l *Log) allow(level slog.Level, node string) (bool, int) {
	if l == nil {
		return true, 0
	}
	b := l.budget
	if level < slog.LevelInfo {
		b = l.debug
	}
	ok, n := b.Allow(node, l.clock.Now())
	if !ok && l.held != nil {
		l.held(ScopeNode)
	}
	return ok, n
}

// Emit writes msg with args at level to log when node's budget allows
// (see allow), with "suppressed" when lines were held back before it. A
// level that log does not write costs no budget.
func (l *Log) Emit(log *slog.Logger, level slog.Level, node, msg string, args ...any) {
	l.Write(log, level, node, msg, CallerPC(), args)
}

// Write is emit with the source to name (pc). It reports whether the line
// was written, or would have been at a level log writes.
func (l *Log) Write(log *slog.Logger, level slog.Level, node, msg string, pc uintptr, args []any) bool {
	ctx := context.Background()
	if !log.Enabled(ctx, level) {
		return true
	}
	ok, n := l.allow(level, node)
	if !ok {
		return false
	}
	if n > 0 {
		args = append(slices.Clip(args), "suppressed", n)
	}
	r := slog.NewRecord(time.Now(), level, msg, pc)
	r.Add(args...)
	_ = log.Handler().Handle(ctx, r)
	return true
}

// CallerPC is the program counter of the caller of its caller: the line
// the source of a record names, as if that code had called the logger
// itself.
func CallerPC() uintptr {
	var pcs [1]uintptr
	runtime.Callers(3, pcs[:]) // runtime.Callers, callerPC, its caller
	return pcs[0]
}

// Keys is how many nodes' budgets of info lines are remembered (at most
// maxNodeLogKeys).
func (l *Log) Keys() int { return l.budget.Keys() }

// Text bounds a text from the network (a reason, a job id) in a log line:
// its first 512 bytes, valid UTF-8, and "…" when it was cut.
func Text(s string) string {
	const max = 512
	if len(s) <= max {
		return s
	}
	return strings.ToValidUTF8(s[:max], "") + "…"
}

// Once bounds the lines about names refused where they enter (a name that
// is not a node's, from a probing sender or a misconfigured site): each
// name is told once, up to a bound of names remembered; past it, one line
// at most every interval counts the rest. It is one goroutine's (the
// Service's loop).
type Once struct {
	max        int
	every      time.Duration
	seen       map[string]struct{}
	suppressed int
	lastLine   time.Time
}

// NewOnce returns a bound that tells max names once each, then one line
// every every.
func NewOnce(max int, every time.Duration) *Once {
	return &Once{max: max, every: every, seen: map[string]struct{}{}}
}

// Allow reports whether to write the line of name now (its first, within
// the bound), or else (count > 0) the line that counts the names not told
// one by one since the last such line, name included.
func (o *Once) Allow(name string, now time.Time) (first bool, count int) {
	if _, told := o.seen[name]; told {
		return false, 0
	}
	if len(o.seen) < o.max {
		o.seen[name] = struct{}{}
		return true, 0
	}
	o.suppressed++
	if now.Sub(o.lastLine) < o.every {
		return false, 0
	}
	count, o.suppressed, o.lastLine = o.suppressed, 0, now
	return false, count
}
