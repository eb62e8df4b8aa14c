// Package aggregator is the aggregator's Service: it keeps what the gossip
// mesh says about every compute node, recomputes each node's view from it
// and serves it to the scheduler (docs/DESIGN.md §5). This package holds
// the Service's loop and its wiring; each concern it drives is a package
// of its own, which asks the Service only through a small interface or
// the arguments it is given.
//
// The parts, from the inside out:
//
//   - The view, package aggregator/view: Compute, a pure function from
//     what the mesh said about each node (member status, gossiped meta,
//     the last direct StateUpdate, bounded and decoded at the intake:
//     package aggregator/intake, which also checks a message's freshness
//     and orders a node's updates) and the time to the served view. Two
//     aggregators fed the same inputs serve the same answers.
//   - Service, which receives the mesh's callbacks without blocking them,
//     keeps the inputs, recomputes the view on every input and on a timer
//     armed for the next central deadline, publishes state changes as
//     events (package aggregator/watch), relays administrators' resume
//     and drain requests to the agents (package aggregator/relay), asks a
//     node before it accuses it (package aggregator/probe), keeps where
//     the nodes are reached across a crash (package aggregator/reach), and
//     tells the actuators (package aggregator/actuate) of each node when
//     it leads.
//   - Incidents, package aggregator/incidents (over the pure grouping of
//     package aggregator/incident): the DOWN nodes grouped by the cause
//     they share, the blast-radius limit in front of the on="down"
//     actuators, clock sanity and the recovery of an incident's nodes when
//     its cause clears (docs/DESIGN.md §5b).
//   - The teardown history and the grace advisor, package
//     aggregator/historian (over packages aggregator/history and
//     aggregator/advisor; docs/DESIGN.md §5d).
//   - The metrics, package aggregator/metrics; the modes, package
//     aggregator/modes; the bounds of the log lines, package
//     aggregator/nodelog.
//   - The HTTP edge, package aggregator/httpapi: the server of the HTTP
//     API described in proto/openapi.yaml, which asks the Service only
//     what its Service interface lists; edge.go adapts the Service to it.
//     The API's types and its Go client are package aggregator/api; the
//     command line is aggregator/cli.
//
// The Service sees the mesh through the small Mesh interface (with its
// fake, package aggregator/meshfake, for tests); Run adapts the real one.
package aggregator
