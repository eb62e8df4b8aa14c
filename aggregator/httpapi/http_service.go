package httpapi

import (
	"context"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/actuate"
	"github.com/gracewatch/gracewatch/aggregator/advisor"
	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/history"
	"github.com/gracewatch/gracewatch/aggregator/incident"
	"github.com/gracewatch/gracewatch/aggregator/reservation"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/aggregator/watch"
)

// Service is what the server asks of the aggregator's Service (which an
// adapter of package aggregator implements). Every method is safe for
// concurrent use; the ones with a context may block until it ends (a node's
// agent is asked and answers), the others return at once. Their errors
// carry their Failure (*Error) where the answer depends on it: Resume,
// Drain and Forget's NotFound, Conflict, Timeout, Unsent and Unavailable,
// ConfirmIncident's NotFound and Conflict.
type Service interface {
	// Name is this aggregator's member name.
	Name() string
	// Grace is the cluster's G.
	Grace() time.Duration
	// Now is the time by the Service's clock.
	Now() time.Time
	// ClusterConfig is the configuration GET /v1/config serves.
	ClusterConfig() api.ClusterConfig
	// NodesIn returns the view's nodes in state want ("": all), sorted by
	// name; Node returns one.
	NodesIn(want view.State) []view.Node
	Node(name string) (view.Node, bool)
	// Aggregators lists the aggregators, and names the leader.
	Aggregators() ([]api.AggregatorInfo, string)
	// Ready is what GET /readyz answers.
	Ready() api.Readiness
	// Subscribe starts a watcher of the view's changes after lastEventID.
	Subscribe(lastEventID string) *watch.Subscription
	// Resume and Drain relay an administrator's request to node's agent.
	Resume(ctx context.Context, node, reason, by string) (view.Node, error)
	Drain(ctx context.Context, node, reason, by string) (view.Node, error)
	// Forget drops a node that left from the view.
	Forget(ctx context.Context, name, by string) error
	// RegisterJobOnNodes registers a job on its nodes.
	RegisterJobOnNodes(ctx context.Context, req api.JobRequest, nodes []string, by string) api.JobResult
	// Reservations is what the reservation planner keeps; false when
	// reservations are off.
	Reservations() (reservation.Status, bool)
	// Incidents lists the open incidents with the blast-radius limit's
	// state; ConfirmIncident records an administrator's confirmation.
	Incidents() ([]incident.Incident, actuate.LimitStatus)
	ConfirmIncident(id uint64, reason, by string, d time.Duration) (actuate.ConfirmScope, error)
	// AutoResume reports whether an incident's nodes are resumed when its
	// cause clears; Leading whether this aggregator runs the actuators.
	AutoResume() bool
	Leading() bool
	// Advise answers the grace advisor's question (history.ErrOff
	// when the teardown history is off); HistoryStats are the history's
	// figures.
	Advise(q advisor.Query) (*advisor.Advice, error)
	HistoryStats() history.Stats
}
