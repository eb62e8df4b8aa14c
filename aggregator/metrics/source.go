package metrics

import (
	"github.com/gracewatch/gracewatch/aggregator/actuate"
	"github.com/gracewatch/gracewatch/aggregator/incident"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/mesh"
)

// Source is what the gauges read of the Service at scrape time. Its
// methods are called on the scrape's goroutine, concurrently with the
// Service's loop: they must be safe for concurrent use and must not block
// for long (the mesh's member list is read in memory).
type Source interface {
	// View returns the served view and what goes with it now.
	View() View
	// Mesh reports whether the mesh's first join completed, and its
	// members (this one included).
	Mesh() (joined bool, members []mesh.Member)
	// Incidents returns the open incidents and the last closed ones, and
	// the blast-radius limit's state.
	Incidents() ([]incident.Incident, actuate.LimitStatus)
	// ClockSkewed returns how many nodes' clocks disagree with this
	// aggregator's by more than the allowance.
	ClockSkewed() int
}

// View is the served view as the gauges read it.
type View struct {
	// Nodes are every served node, in any order; their reports' detail
	// is not read.
	Nodes []view.Node
	// Watchers is how many watchers of /v1/watch are connected.
	Watchers int
	// Lowest: this aggregator has the lowest live name (it leads once the
	// mesh has joined).
	Lowest bool
	// Mode is this aggregator's mode; NodeModes counts the nodes by their
	// agents' mode (config.ModeEnforce, config.ModeObserve); Mixed: they
	// do not all run in one mode.
	Mode      string
	NodeModes map[string]int
	Mixed     bool
}
