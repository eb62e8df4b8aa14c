// Package meshlink holds the node agent's side of the mesh: it publishes
// the node's state (the meta it gossips, and a StateUpdate sent straight to
// every aggregator, with each released teardown until every aggregator has
// it) and carries out the control messages aggregators send (drain, resume,
// a job's registration, a probe).
//
// A Link is built before the two it connects: the teardown supervisor is
// built with its OnChange and OnReport, the mesh with the Link as its
// Handler, and Link.Run is given both (Supervisor and Mesh, the small
// interfaces of what it asks of them). The supervisor's callbacks and the
// mesh's never wait on the network.
package meshlink
