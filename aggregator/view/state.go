package view

// State is a node's state in the view (docs/DESIGN.md §2): the view's own
// type, converted to the HTTP API's (api.State, whose constants say what
// each state means to the scheduler) at the HTTP edge (wire.go).
type State string

// The states of the view, named as the API names them.
const (
	StateUp          State = "up"
	StateTeardown    State = "teardown"
	StateDown        State = "down"
	StateUnreachable State = "unreachable"
)

// States lists the states in the order the API documents them.
var States = []State{StateUp, StateTeardown, StateDown, StateUnreachable}
