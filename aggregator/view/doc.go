// Package view holds the aggregator's view: the pure function Compute from
// what the mesh said about each node (its member status, gossiped meta and
// last direct StateUpdate, as the node input NodeInput) and the time to
// the node's served state, with the rules around it (the central deadline,
// the hold of a gone member, observe mode's would-be drains, whether a
// down is a grace violation). Two aggregators fed the same inputs serve
// the same answers (docs/DESIGN.md §5).
//
// It works on the aggregator's own types only: the wire's are decoded at
// the intake and the view's Node is converted to the HTTP API's at the
// HTTP edge, so that the view imports neither (TestImportsNoWireTypes).
package view
