package aggregator

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gracewatch/gracewatch/aggregator/actuate"
	"github.com/gracewatch/gracewatch/aggregator/history"
	"github.com/gracewatch/gracewatch/aggregator/incident"
	"github.com/gracewatch/gracewatch/aggregator/reservation"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/metrics"
)

// Defaults of Options.
const (
	DefaultControlTimeout = 10 * time.Second
	DefaultHistory        = 4096
	// DefaultHistoryBytes bounds the history by the bytes its events hold
	// (eventSize) as well as by count: 4,096 typical events (a summary of
	// about 1 KB) fit in a quarter of it; maximal ones (a 4 KiB reason, 64
	// teardowns: about 38 KB) are held about 430 deep instead of the 4,096
	// × 3 MB that 50 StateUpdates with 3 MB reasons once cost. A watcher
	// that reconnects past it gets a snapshot.
	DefaultHistoryBytes     = 16 << 20
	DefaultSubscriberBuffer = 1024
	// joinRecheck is how often leadership is re-evaluated while the mesh
	// has not joined yet (the mesh tells no event when it does).
	joinRecheck = time.Second
)

// Options configure a Service.
type Options struct {
	// Name is this aggregator's member name.
	Name string
	// Policy is the view's policy.
	Policy view.Policy
	// Grace is the cluster's G, served by /v1/config.
	Grace time.Duration
	// Actuators run on transitions when this aggregator leads.
	Actuators []actuate.Config
	// Reservations, when enabled, keep the scheduler's reservations on the
	// nodes tearing down while this aggregator leads.
	Reservations reservation.Config
	// ReservationScheduler replaces the command of Reservations (tests).
	ReservationScheduler reservation.Scheduler
	// Incidents groups the DOWN nodes by cause, limits the drains and
	// resumes an incident's nodes when its cause clears (package
	// aggregator/incidents).
	// The zero value groups with the defaults, limits nothing and
	// resumes nothing; the configuration's defaults limit.
	Incidents incident.Config
	// MeshInsecure is reported by Ready (the mesh runs without encryption).
	MeshInsecure bool
	// ProvenOnly is node restriction (the mesh refuses unproven input): a
	// node's state is taken from its direct updates only, which the mesh
	// has proven to come from it, never from its gossiped meta (a claim),
	// and a member enters the view with its first update. Off (the mesh
	// runs with allow_unsigned), Ready warns of it.
	ProvenOnly bool
	// Clock is the time source; nil is the wall clock.
	Clock clock.Clock
	// Logger receives the events; nil discards them.
	Logger *slog.Logger
	// ControlTimeout bounds the wait for an agent's ControlAck; 0 means
	// DefaultControlTimeout.
	ControlTimeout time.Duration
	// History is how many events are kept for Last-Event-ID resumption; 0
	// means DefaultHistory.
	History int
	// HistoryBytes bounds the history by eventSize; 0 means
	// DefaultHistoryBytes.
	HistoryBytes int
	// SubscriberBuffer is how many events a watcher may lag behind before
	// it is dropped; 0 means DefaultSubscriberBuffer.
	SubscriberBuffer int
	// ActuatorBackoff is the first retry delay of a failed actuator (it
	// doubles, up to a minute); 0 means one second.
	ActuatorBackoff time.Duration
	// StateDir, if set, is where the actuators keep the nodes gracewatch
	// drained (drained.json), so that a restarted aggregator still
	// undrains them. Empty: in memory only.
	StateDir string
	// TeardownHistory, with a Dir, keeps every released teardown the
	// nodes report, for the grace advisor (package aggregator/historian,
	// docs/DESIGN.md §5d). No Dir: off.
	TeardownHistory history.Options
	// Registry, if set, receives the Service's metrics
	// (gracewatch_aggregator_*; package aggregator/metrics). Nil keeps them
	// unregistered.
	Registry prometheus.Registerer
	// Host, if set, gives the facts of the machine the aggregator runs on
	// (load, memory, uptime, state dir space; internal/hostinfo.Reader.Read,
	// through gopsutil) for /readyz and the state dir metrics. It must
	// return within a bounded time.
	Host metrics.HostFunc
}
