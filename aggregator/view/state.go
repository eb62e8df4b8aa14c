package view

// State is a node's state in the view (docs/DESIGN.md §2): the view's own
// type, converted to the HTTP API's (api.State) at the HTTP edge (wire.go).
type State string

// The states of the view, named as the API names them.
const (
	// StateUp: no teardown in progress; schedulable.
	StateUp State = "up"
	// StateTeardown: a teardown within its grace; schedulable from FreeAt.
	StateTeardown State = "teardown"
	// StateDown: a grace violation, hung processes, an administrator's
	// drain, or a missed teardown deadline; not schedulable.
	StateDown State = "down"
	// StateUnreachable: the aggregator cannot tell the node's state;
	// not schedulable.
	StateUnreachable State = "unreachable"
)

// States lists the states in the order the API documents them.
var States = []State{StateUp, StateTeardown, StateDown, StateUnreachable}
