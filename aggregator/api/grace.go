package api

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The grace advisor's answer (GET /v1/grace; docs/DESIGN.md §5d). Every
// duration is in seconds.

// GraceAdvice is what candidate values of G would have done over a window
// of the teardown history and a set of nodes, and the smallest G that
// would have drained only nodes that really hung.
type GraceAdvice struct {
	// From and To bound the teardowns' starts, min(T_end, E): [From, To).
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	Now  time.Time `json:"now"`
	// Nodes is the hostlist asked for; empty: every node.
	Nodes string `json:"nodes,omitempty"`
	// Records counts the released teardowns in the window and node set,
	// Running those still running (counted with their time so far),
	// NodesSeen the distinct nodes of both.
	Records   int `json:"records"`
	Running   int `json:"running"`
	NodesSeen int `json:"nodes_seen"`
	// Durations is the released teardowns' distribution.
	Durations GraceDistribution `json:"durations"`
	// LongestRunning is the longest teardown still running (absent: none).
	LongestRunning *GraceEvidence `json:"longest_running,omitempty"`
	// Outcomes counts the released teardowns by outcome.
	Outcomes map[string]int `json:"outcomes"`
	// GraceInForce is the cluster's G.
	GraceInForce float64          `json:"grace_in_force"`
	Candidates   []GraceCandidate `json:"candidates"`
	// KillPathFloor is the largest floor of the nodes' exec systems' kill
	// paths that two nodes (the advisor's MinBacking) report (absent: fewer
	// nodes of the set sent one, unknown; a note names a lone one).
	KillPathFloor *GraceFloor `json:"kill_path_floor,omitempty"`
	// Thin says why no G is recommended (absent when one is).
	Thin           string               `json:"thin,omitempty"`
	Recommendation *GraceRecommendation `json:"recommendation,omitempty"`
	// TopG is the G the top lists count "long" over.
	TopG        float64    `json:"top_g"`
	TopUsers    []GraceTop `json:"top_users"`
	TopCommands []GraceTop `json:"top_commands"`
	// Notes are caveats of this answer.
	Notes   []string     `json:"notes"`
	History GraceHistory `json:"history"`
}

// GraceDistribution is a count and nearest-rank percentiles, in seconds,
// of the released teardowns as they count: no node for more than NodeCap
// of them, none as longer than Bound.
type GraceDistribution struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p999"`
	Max   float64 `json:"max"`
	// NodeCap is the most teardowns one node counts for (twice the median
	// node's); Capped the nodes over it (the most first, at most 10).
	NodeCap int              `json:"node_cap"`
	Capped  []GraceNodeCount `json:"capped"`
	// Bound is the longest duration counted: the longest teardown that two
	// nodes reached (0: fewer nodes); Above are the longer ones, each the
	// own longest of a node, counted as Bound.
	Bound float64         `json:"bound"`
	Above []GraceEvidence `json:"above"`
}

// GraceNodeCount is one node's count of teardowns.
type GraceNodeCount struct {
	Node    string `json:"node"`
	Records int    `json:"records"`
}

// GraceCandidate is one row of the what-if table.
type GraceCandidate struct {
	G       float64 `json:"g"`
	InForce bool    `json:"in_force"`
	// Overdue counts the teardowns longer than G; Nodes their distinct
	// nodes (the nodes drained).
	Overdue int `json:"overdue"`
	Nodes   int `json:"nodes"`
	// PlannedWrong is Σ (duration − G) over the overdue teardowns, in
	// seconds of node time (running ones up to now).
	PlannedWrong float64 `json:"planned_wrong"`
	// FalseDrains counts the overdue ones that ended by themselves.
	FalseDrains int `json:"false_drains"`
	// Unknown counts the signalled teardowns no longer than G: whether G
	// would have caught them is not known.
	Unknown int `json:"unknown"`
}

// GraceEvidence is one teardown an answer rests on.
type GraceEvidence struct {
	Node     string  `json:"node"`
	Job      string  `json:"job"`
	User     string  `json:"user"`
	Command  string  `json:"command"`
	Cause    string  `json:"cause,omitempty"`
	Duration float64 `json:"duration"`
	Outcome  string  `json:"outcome"`
}

// GraceFloor is the kill-path floor and its evidence: the node and path
// of the floor followed, how many nodes report at least it (Backing, the
// first 10 named in Nodes), and the larger floors fewer nodes report, not
// followed (Above).
type GraceFloor struct {
	Seconds float64          `json:"seconds"`
	Node    string           `json:"node"`
	Path    string           `json:"path"`
	Backing int              `json:"backing_nodes"`
	Nodes   []string         `json:"nodes"`
	Above   []GraceNodeFloor `json:"above"`
}

// GraceNodeFloor is one node's kill-path floor.
type GraceNodeFloor struct {
	Node    string  `json:"node"`
	Seconds float64 `json:"seconds"`
	Path    string  `json:"path"`
}

// GraceRecommendation is the smallest G at or above the floor that drains
// only nodes that really hung, of the values two nodes reached.
type GraceRecommendation struct {
	G float64 `json:"g"`
	// Driver is what G rests on: "self_ended" (LongestSelfEnded) or
	// "floor" (KillPathFloor).
	Driver string `json:"driver"`
	// LongestSelfEnded is the longest self-ended teardown two nodes
	// reached (the second node's own longest); Backing counts the nodes
	// whose own longest reaches it, Nodes names the first 10; Unbacked
	// are the longer ones (each a node's own longest that no other
	// reached): not followed, drained for nothing if they recur.
	LongestSelfEnded *GraceEvidence  `json:"longest_self_ended"`
	Backing          int             `json:"backing_nodes"`
	Nodes            []string        `json:"nodes"`
	Unbacked         []GraceEvidence `json:"unbacked"`
	Caught           int             `json:"caught"`
	CaughtExamples   []GraceEvidence `json:"caught_examples"`
	Missed           int             `json:"missed"`
	Signalled        int             `json:"signalled"`
	Unreported       int             `json:"unreported"`
	// FalseDrains counts the teardowns longer than G that ended by
	// themselves (those of the Unbacked nodes).
	FalseDrains int `json:"false_drains"`
}

// GraceTop is one user's or command's count of long or hung teardowns.
type GraceTop struct {
	Name string `json:"name"`
	Long int    `json:"long"`
	Hung int    `json:"hung"`
}

// GraceHistory is what the history holds.
type GraceHistory struct {
	Records     int64      `json:"records"`
	Bytes       int64      `json:"bytes"`
	OldestStart *time.Time `json:"oldest_start,omitempty"`
}

// GraceQuery is the question: every field optional.
type GraceQuery struct {
	// From and To bound the window (zero: the server's defaults, the
	// last 30 days).
	From, To time.Time
	// Nodes is a hostlist; empty: every node.
	Nodes string
	// G lists candidate values (else the defaults); TopG is the G of the
	// top lists; Top their length.
	G    []time.Duration
	TopG time.Duration
	Top  int
}

// Grace asks the grace advisor (GET /v1/grace).
func (c *Client) Grace(ctx context.Context, gq GraceQuery) (GraceAdvice, error) {
	q := url.Values{}
	if !gq.From.IsZero() {
		q.Set("from", gq.From.UTC().Format(time.RFC3339))
	}
	if !gq.To.IsZero() {
		q.Set("to", gq.To.UTC().Format(time.RFC3339))
	}
	if gq.Nodes != "" {
		q.Set("nodes", gq.Nodes)
	}
	if len(gq.G) > 0 {
		gs := make([]string, len(gq.G))
		for i, g := range gq.G {
			gs[i] = g.String()
		}
		q.Set("g", strings.Join(gs, ","))
	}
	if gq.TopG > 0 {
		q.Set("top_g", gq.TopG.String())
	}
	if gq.Top > 0 {
		q.Set("top", strconv.Itoa(gq.Top))
	}
	var ga GraceAdvice
	err := c.call(ctx, "GET", "/v1/grace", q, nil, &ga)
	return ga, err
}
