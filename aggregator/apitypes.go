package aggregator

import "github.com/gracewatch/gracewatch/aggregator/api"

// The HTTP API's types and client are package aggregator/api; the server
// here serves them under these names. The view's own node is Node
// (package aggregator/view), converted at the HTTP edge (wire.go).
type (
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
