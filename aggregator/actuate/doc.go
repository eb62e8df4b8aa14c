// Package actuate holds the aggregator's actuators: the [[actuator]]
// commands that drain a node in the scheduler when the view serves it down
// and resume it when it is up again, run by the leading aggregator only,
// with retries, the blast-radius limit in front of the drains, batches of
// resumes, and the drained set kept across restarts (docs/DESIGN.md §5,
// §5b).
//
// The Service tells the Actuators of each node's served state
// (Actuators.Observe) and of its leadership (Actuators.SetLeader); they
// keep their own lock and never call back into the Service.
package actuate
