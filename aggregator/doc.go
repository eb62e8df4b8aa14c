// Package aggregator is the aggregator's Service: it keeps what the gossip
// mesh says about every compute node, recomputes each node's view from it
// and serves it to the scheduler (docs/DESIGN.md §5).
//
// This package holds the Service's loop and its wiring: it receives the
// mesh's callbacks without blocking them, keeps the inputs, recomputes
// the view (package aggregator/view) on every input and on a timer armed
// for the next deadline, and hands each concern what it needs. Each
// concern is a package of its own that asks the Service only through a
// small interface or the values it is handed: the intake's pure part, the
// events to the watchers, the relayed controls, the probes, the proven
// addresses, the incidents, the teardown history, the jobs, the modes, the
// metrics, the actuators and the HTTP edge (docs/DESIGN.md §8 lists them;
// edge.go adapts the Service to the edge's interface).
//
// The Service sees the mesh through the small Mesh interface (with its
// fake, package aggregator/meshfake, for tests); Run adapts the real one.
package aggregator
