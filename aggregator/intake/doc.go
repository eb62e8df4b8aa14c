// Package intake holds what the aggregator does to an agent's messages
// where they enter, before the view sees them: it bounds a Meta, a
// StateUpdate or a Handover in the wire's form (bounds.go), so that what is
// kept per node stays bounded whatever a node sends, decodes them once into
// the view's input (decode.go, package aggregator/view), checks that a
// message is fresh (fresh.go: its send time against the aggregator's
// clock), orders a node's updates (order.go), builds and adopts the
// Handover of gone agents between aggregators (handover.go), and bounds
// the nodes the mesh has not told of (strangers.go).
//
// It is pure: no lock, no clock, no goroutine. The Service (package
// aggregator) calls it from its loop (intake.go there); past the two, no
// part of the aggregator reads a node's state in the wire's types
// (proto/gwpb) but the teardown history (package aggregator/historian,
// which keeps what a node said): the view imports none.
package intake
