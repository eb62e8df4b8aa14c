package aggregator

import "github.com/gracewatch/gracewatch/aggregator/api"

// The HTTP API's types and client are package aggregator/api; the server
// here serves them under these names. The view's own node is Node
// (view.go), converted at the HTTP edge (wire.go).
type (
	State           = api.State
	ErrorBody       = api.ErrorBody
	ActionRequest   = api.ActionRequest
	NodeList        = api.NodeList
	ClusterConfig   = api.ClusterConfig
	JobRequest      = api.JobRequest
	JobNodeResult   = api.JobNodeResult
	JobResult       = api.JobResult
	Forgotten       = api.Forgotten
	ReservationList = api.ReservationList
	ReservationInfo = api.ReservationInfo
)

// Served states (api.State).
const (
	StateUp          = api.StateUp
	StateTeardown    = api.StateTeardown
	StateDown        = api.StateDown
	StateUnreachable = api.StateUnreachable
)

// ParseState returns the State named s (api.ParseState).
func ParseState(s string) (State, error) { return api.ParseState(s) }
