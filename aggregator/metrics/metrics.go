// Package metrics owns the aggregator's gracewatch_aggregator_* metrics:
// the counters, which the Service feeds with plain values where things
// happen (the loop's recomputation, the actuators' goroutines, the
// watchers' publication), and the gauges, which read the Service at scrape
// time through the small Source interface. The package imports no wire
// type and nothing of HTTP (TestImportsNoWireTypes): the Service turns
// what it knows into the values it hands over.
package metrics

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gracewatch/gracewatch/aggregator/actuate"
	"github.com/gracewatch/gracewatch/aggregator/nodelog"
	"github.com/gracewatch/gracewatch/aggregator/view"
	imetrics "github.com/gracewatch/gracewatch/internal/metrics"
	"github.com/gracewatch/gracewatch/internal/runcmd"
)

// Subsystem names the aggregator's metrics (gracewatch_aggregator_*).
const Subsystem = "aggregator"

// deadlineBuckets suit the time from a teardown deadline D to the DOWN
// served here: the agent latches within half a second of D, the central
// deadline adds clock_skew_allowance (5 s by default).
var deadlineBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// Actuator run results.
const (
	resultSuccess = "success"
	resultFailure = "failure"
	resultTimeout = "timeout"
)

// Probe reasons: the label why of gracewatch_aggregator_probes_total whose
// series exist from the start.
const (
	ProbeDeadline = "deadline" // before the central deadline
	ProbeGone     = "gone"     // memberlist says the node is dead or left
)

// Refusals: the label what of gracewatch_aggregator_intake_refused_total.
var refusals = []string{"member", "message", "handover", "forget", "unseen", "stale", "future_start", "cause"}

// transitionCauses lists the (to, cause) pairs Compute can give, so that
// each series exists from the start: the agent's own up, teardown and
// down, the central deadline's down, and unreachable, or down with
// unreachable_is_down, for each cause of a node not heard.
func transitionCauses() [][2]string {
	pairs := [][2]string{
		{string(view.StateUp), view.CauseAgent},
		{string(view.StateTeardown), view.CauseAgent},
		{string(view.StateDown), view.CauseAgent},
		{string(view.StateDown), view.CauseCentralDeadline},
	}
	for _, to := range []view.State{view.StateUnreachable, view.StateDown} {
		for _, cause := range []string{view.CauseUnreachable, view.CauseDecodeError, view.CauseNoState, view.CauseUnknownState} {
			pairs = append(pairs, [2]string{string(to), cause})
		}
	}
	return pairs
}

// Metrics are the Service's gracewatch_aggregator_* metrics. Counts are by
// state and by cause; only the per-node families of the view's collector
// carry a node label (one series per node, bounded by the cluster's size;
// never a job id or a pid). Safe for concurrent use; nothing blocks but the
// state dir's statfs, which is bounded in time.
type Metrics struct {
	transitions     *prometheus.CounterVec
	downLatency     prometheus.Histogram
	actuatorRuns    *prometheus.CounterVec
	watchersDropped prometheus.Counter
	refused         *prometheus.CounterVec
	probes          *prometheus.CounterVec
	stateWrites     prometheus.Counter
	logSuppressed   *prometheus.CounterVec
	incidentsOpened prometheus.Counter
	incidentsClosed prometheus.Counter
	incidentResumes *prometheus.CounterVec
	view            *viewCollector
	incidents       *incidentCollector
	stateDir        prometheus.Collector // nil without a HostFunc
}

func opts(name, help string) prometheus.Opts {
	return prometheus.Opts{Namespace: imetrics.Namespace, Subsystem: Subsystem, Name: name, Help: help}
}

// desc is a gauge's description of the aggregator's subsystem.
func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(imetrics.Namespace, Subsystem, name), help, labels, nil)
}

// New returns the metrics, whose gauges read src at scrape time, and the
// state dir's through host when it is not nil. Nothing is registered:
// Collectors returns what to register.
func New(src Source, host imetrics.HostFunc) *Metrics {
	m := &Metrics{
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts(opts("transitions_total",
			"Changes of a node's served state, by the new state and what decided it: agent (its own report), central_deadline (no report by D + clock_skew_allowance), unreachable (dead or left), decode_error, no_state, unknown_state. A node's first sight is not counted.")),
			[]string{"to", "cause"}),
		downLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: imetrics.Namespace, Subsystem: Subsystem, Name: "deadline_to_down_seconds",
			Help:    "For a node that went down by a grace violation (its agent's report, or the central deadline): the time from its teardown deadline D to when this aggregator served it down.",
			Buckets: deadlineBuckets,
		}),
		actuatorRuns: prometheus.NewCounterVec(prometheus.CounterOpts(opts("actuator_runs_total",
			"Actuator command runs (each attempt, retries included), by transition and result.")),
			[]string{"on", "result"}),
		watchersDropped: prometheus.NewCounter(prometheus.CounterOpts(opts("watchers_dropped_total",
			"Watchers of /v1/watch disconnected for falling behind."))),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts(opts("probes_total",
			"Nodes asked directly before this aggregator served them down or unreachable (ask before accuse), by why (deadline: before the central deadline; gone: memberlist says the node is dead or left) and result (answered, unanswered: no answer within the wait, or not reachable).")),
			[]string{"why", "result"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts(opts("intake_refused_total",
			"What the aggregator refused where it enters, by what: an invalid node name (not a host name, or ALL) of a member, of a message's sender, in a handover or a forget; unseen: a message dropped from a node the mesh has not told of, past 1,024 such nodes; stale: a node's state update or ack whose send time is not within clock_skew_allowance of this aggregator's clock (a replay, or a clock that is off); future_start: a state update whose agent start time is in the future.")),
			[]string{"what"}),
		stateWrites: prometheus.NewCounter(prometheus.CounterOpts(opts("state_write_failures_total",
			"Failed writes of the drained set under state_dir (a full or read-only disk): a restart would forget which nodes gracewatch drained."))),
		logSuppressed: prometheus.NewCounterVec(prometheus.CounterOpts(opts("log_lines_suppressed_total",
			"Log lines held back by their bound, by scope: node (a node's lines past 20 a minute, whatever their kind: its state, clock, incident, actuators), cluster (changes of the cluster's modes within a minute of the last line about them). Each is reported as suppressed on the next line of its node or kind.")),
			[]string{"scope"}),
		incidentsOpened: prometheus.NewCounter(prometheus.CounterOpts(opts("incidents_opened_total",
			"Incidents opened: groups of DOWN nodes that share a cause (a file system, a wait channel; docs/DESIGN.md §5b)."))),
		incidentsClosed: prometheus.NewCounter(prometheus.CounterOpts(opts("incidents_closed_total",
			"Incidents closed: their last node came back."))),
		incidentResumes: prometheus.NewCounterVec(prometheus.CounterOpts(opts("incident_resumes_total",
			"Nodes of a shared incident resumed by [incidents] auto_resume once their agent verified them clean, by result.")),
			[]string{"result"}),
		view:      newViewCollector(src),
		incidents: newIncidentCollector(src),
	}
	if host != nil {
		m.stateDir = imetrics.NewStateDirCollector(Subsystem, host)
	}
	for _, tc := range transitionCauses() {
		m.transitions.WithLabelValues(tc[0], tc[1])
	}
	for _, why := range []string{ProbeDeadline, ProbeGone} {
		for _, r := range []string{"answered", "unanswered"} {
			m.probes.WithLabelValues(why, r)
		}
	}
	for _, what := range refusals {
		m.refused.WithLabelValues(what)
	}
	for _, on := range []string{actuate.OnDown, actuate.OnUp} {
		for _, r := range []string{resultSuccess, resultFailure, resultTimeout} {
			m.actuatorRuns.WithLabelValues(on, r)
		}
	}
	for _, scope := range []string{nodelog.ScopeNode, nodelog.ScopeCluster} {
		m.logSuppressed.WithLabelValues(scope)
	}
	for _, r := range []string{resultSuccess, resultFailure} {
		m.incidentResumes.WithLabelValues(r)
	}
	return m
}

// Collectors returns every collector of m, to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	cs := []prometheus.Collector{m.transitions, m.downLatency, m.actuatorRuns, m.watchersDropped, m.refused, m.probes, m.stateWrites, m.logSuppressed,
		m.view,
		m.incidentsOpened, m.incidentsClosed, m.incidentResumes, m.incidents}
	if m.stateDir != nil {
		cs = append(cs, m.stateDir)
	}
	return cs
}

// Transition counts a node's change of served state to to, decided by
// cause and, for a down by a grace violation (d, its deadline, is not
// zero), observes the time from d to now.
func (m *Metrics) Transition(to view.State, cause string, d time.Time, now time.Time) {
	m.transitions.WithLabelValues(string(to), cause).Inc()
	if !d.IsZero() {
		m.downLatency.Observe(now.Sub(d).Seconds())
	}
}

// ActuatorRun counts one run of an actuator command on transition on
// (actuate.Actuators.OnRun) that ended with err.
func (m *Metrics) ActuatorRun(on string, err error) {
	r := resultSuccess
	switch {
	case errors.Is(err, runcmd.ErrTimedOut):
		r = resultTimeout
	case err != nil:
		r = resultFailure
	}
	m.actuatorRuns.WithLabelValues(on, r).Inc()
}

// Probe counts one probe's outcome; why is ProbeDeadline, ProbeGone or
// another reason.
func (m *Metrics) Probe(why string, answered bool) {
	r := "unanswered"
	if answered {
		r = "answered"
	}
	m.probes.WithLabelValues(why, r).Inc()
}

// Refused counts what the intake refused: "member", "message", "handover",
// "forget", "unseen", "stale", "future_start" or "cause".
func (m *Metrics) Refused(what string) { m.refused.WithLabelValues(what).Inc() }

// WatcherDropped counts a watcher disconnected for falling behind.
func (m *Metrics) WatcherDropped() { m.watchersDropped.Inc() }

// StateWriteFailed counts a failed write of the drained set
// (actuate.Actuators.OnSaveError).
func (m *Metrics) StateWriteFailed() { m.stateWrites.Inc() }

// LogSuppressed counts a log line held back by its bound, by scope
// (nodelog.ScopeNode, nodelog.ScopeCluster).
func (m *Metrics) LogSuppressed(scope string) { m.logSuppressed.WithLabelValues(scope).Inc() }

// IncidentOpened counts an incident opened.
func (m *Metrics) IncidentOpened() { m.incidentsOpened.Inc() }

// IncidentClosed counts an incident closed.
func (m *Metrics) IncidentClosed() { m.incidentsClosed.Inc() }

// IncidentResumed counts an incident's auto-resume of one node, by whether
// its agent did it.
func (m *Metrics) IncidentResumed(ok bool) {
	r := resultSuccess
	if !ok {
		r = resultFailure
	}
	m.incidentResumes.WithLabelValues(r).Inc()
}
