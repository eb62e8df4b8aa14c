// Package modes counts the modes at the aggregator (docs/DESIGN.md §5c):
// its own, its nodes' agents', and the line that says when they are
// mixed, at most once every nodelog.ClusterLogEvery. It imports no wire
// type and nothing of HTTP (TestImportsNoWireTypes).
package modes

import (
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/nodelog"
	"github.com/gracewatch/gracewatch/internal/config"
)

// Name is the configuration's name of a mode: observe or enforce.
func Name(observe bool) string {
	if observe {
		return config.ModeObserve
	}
	return config.ModeEnforce
}

// Count counts the served nodes by the mode of their agents (unknown ones
// are not counted), kept as the view changes so that a mixed cluster is
// told without a walk over every node. Move, LogMixed and LineDue are the
// Service's loop's (one goroutine); Own, Mixed and State are safe for
// concurrent use.
type Count struct {
	own  string
	log  *slog.Logger
	held func() // a line held back by its bound

	mu    sync.RWMutex
	nodes map[string]int

	// The loop's.
	logged  bool      // the last mixed state logged
	seen    bool      // the last mixed state seen
	lineAt  time.Time // of the last line
	changes int       // changes seen since lineAt that had no line of their own
}

// New returns the count of an aggregator in mode own (Name) of no node;
// its lines go to log, and held is called for each line its bound holds
// back (log_lines_suppressed_total{scope="cluster"}).
func New(own string, log *slog.Logger, held func()) *Count {
	return &Count{own: own, log: log, held: held, nodes: map[string]int{}}
}

// Own is the aggregator's mode.
func (m *Count) Own() string { return m.own }

// Move counts a node whose mode changed from one to another ("" for none).
func (m *Count) Move(from, to string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if from != "" {
		if m.nodes[from]--; m.nodes[from] <= 0 {
			delete(m.nodes, from)
		}
	}
	if to != "" {
		m.nodes[to]++
	}
}

// Mixed reports whether the nodes and the aggregator do not all run in one
// mode.
func (m *Count) Mixed() bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.mixedLocked()
}

func (m *Count) mixedLocked() bool {
	for mode := range m.nodes {
		if mode != m.own {
			return true
		}
	}
	return false
}

// State returns the nodes by mode, whether the cluster is mixed, and how
// the nodes are split, e.g. "3 enforce, 7 observe".
func (m *Count) State() (nodes map[string]int, mixed bool, split string) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return maps.Clone(m.nodes), m.mixedLocked(), m.describeLocked()
}

func (m *Count) describeLocked() string {
	var parts []string
	for _, mode := range []string{config.ModeEnforce, config.ModeObserve} {
		if n := m.nodes[mode]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, mode))
		}
	}
	return strings.Join(parts, ", ")
}

// LineDue is when the line that nodelog.ClusterLogEvery held back is due:
// the state seen is not the one logged; zero when none is.
func (m *Count) LineDue() time.Time {
	if m.seen == m.logged {
		return time.Time{}
	}
	return m.lineAt.Add(nodelog.ClusterLogEvery)
}

// LogMixed logs when the cluster becomes mixed, and when it is one mode
// again, at most once per nodelog.ClusterLogEvery: one node that flips its
// mode in every update changes the cluster's as often. A change within the
// interval is counted (held); once it is over, a line says the state then
// (the Service's timer wakes the loop for it at LineDue) with the changes
// that had no line of their own as "suppressed".
func (m *Count) LogMixed(now time.Time) {
	_, mixed, split := m.State()
	changed := mixed != m.seen
	if changed {
		m.seen = mixed
	}
	due := m.lineAt.IsZero() || now.Sub(m.lineAt) >= nodelog.ClusterLogEvery || now.Before(m.lineAt)
	if mixed == m.logged || !due {
		if changed {
			m.changes++
			m.held()
		}
		return
	}
	suppressed := m.changes
	m.logged, m.lineAt, m.changes = mixed, now, 0
	var more []any
	if suppressed > 0 {
		more = []any{"suppressed", suppressed}
	}
	if mixed {
		m.log.Warn("the cluster runs in mixed modes: every agent and aggregator should have the same mode",
			append([]any{"aggregator_mode", m.own, "nodes", split}, more...)...)
		return
	}
	m.log.Info("the cluster runs in one mode again", append([]any{"mode", m.own, "nodes", split}, more...)...)
}
