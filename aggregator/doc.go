// Package aggregator is the aggregator's Service: it keeps what the gossip
// mesh says about every compute node, recomputes each node's view from it
// and serves it to the scheduler (docs/DESIGN.md §5).
//
// The parts, from the inside out:
//
//   - The view, package aggregator/view: Compute, a pure function from
//     what the mesh said about each node (member status, gossiped meta,
//     the last direct StateUpdate, bounded and decoded at the intake:
//     package aggregator/intake) and
//     the time to the served view. Two aggregators fed the same inputs
//     serve the same answers.
//   - Service, which receives the mesh's callbacks without blocking them,
//     keeps the inputs, recomputes the view on every input and on a timer
//     armed for the next central deadline, publishes state changes as
//     events (package aggregator/watch), relays administrators' resume
//     and drain requests to the agents, and tells the actuators (package
//     aggregator/actuate) of each node when it leads.
//   - Incidents (incidents.go, over the pure grouping of package
//     aggregator/incident): the DOWN nodes grouped by the cause they
//     share, the blast-radius limit in front of the on="down" actuators,
//     clock sanity (latch.go) and the recovery of an incident's nodes when
//     its cause clears (docs/DESIGN.md §5b).
//   - The teardown history and the grace advisor (teardown_history.go,
//     over packages aggregator/history and aggregator/advisor;
//     docs/DESIGN.md §5d).
//   - The HTTP edge, package aggregator/httpapi: the server of the HTTP
//     API described in proto/openapi.yaml, which asks the Service only
//     what its Service interface lists; edge.go adapts the Service to it.
//     The API's types and its Go client are package aggregator/api; the
//     command line is aggregator/cli.
//
// The Service sees the mesh through the small Mesh interface (with
// its fake, package aggregator/meshfake, for tests); Run adapts the real one.
package aggregator
