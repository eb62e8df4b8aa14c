// Package execsys holds what the node agent asks of the exec systems (Slurm,
// Flux) by running their own commands: their kill path at a job's time
// limit, against which `nodeagent config check` and the grace advisor weigh
// the grace G (CheckAll, KillPathOf), and a job's current expiration, which
// the supervisor asks before it latches a node DOWN ([teardown]
// expiration_command: ExpirationCommand).
//
// It links the standard library only: a test holds it so.
package execsys
