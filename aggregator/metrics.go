package aggregator

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gracewatch/gracewatch/aggregator/actuate"
	"github.com/gracewatch/gracewatch/aggregator/nodelog"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/metrics"
	"github.com/gracewatch/gracewatch/internal/runcmd"
	"github.com/gracewatch/gracewatch/mesh"
)

const subsystem = "aggregator"

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

// transitionCauses lists the (to, cause) pairs Compute can give, so that
// each series exists from the start.
var transitionCauses = [][2]string{
	{string(view.StateUp), view.CauseAgent},
	{string(view.StateTeardown), view.CauseAgent},
	{string(view.StateDown), view.CauseAgent},
	{string(view.StateDown), view.CauseCentralDeadline},
	{string(view.StateUnreachable), view.CauseUnreachable},
	{string(view.StateUnreachable), view.CauseDecodeError},
	{string(view.StateUnreachable), view.CauseNoState},
	{string(view.StateUnreachable), view.CauseUnknownState},
	{string(view.StateDown), view.CauseUnreachable},
	{string(view.StateDown), view.CauseDecodeError},
	{string(view.StateDown), view.CauseNoState},
	{string(view.StateDown), view.CauseUnknownState},
}

// probe counts one probe's outcome.
func (m *serviceMetrics) probe(why string, answered bool) {
	r := "unanswered"
	if answered {
		r = "answered"
	}
	m.probes.WithLabelValues(why, r).Inc()
}

// serviceMetrics are the Service's gracewatch_aggregator_* metrics. The
// counters are updated where things happen (the loop's recomputation, the
// actuators' goroutines, the watchers' publication); the gauges are read
// from the Service at scrape time. Counts are by state and by cause; only
// the per-node families of nodeCollector carry a node label (one series per
// node, bounded by the cluster's size; never a job id or a pid). Safe for
// concurrent use; nothing blocks but the state dir's statfs, which is
// bounded in time.
type serviceMetrics struct {
	transitions     *prometheus.CounterVec
	downLatency     prometheus.Histogram
	actuatorRuns    *prometheus.CounterVec
	watchersDropped prometheus.Counter
	refused         *prometheus.CounterVec
	probes          *prometheus.CounterVec
	stateWrites     prometheus.Counter
	logSuppressed   *prometheus.CounterVec
	state           *stateCollector
	nodes           *nodeCollector
	stateDir        prometheus.Collector // nil without Options.Host
	*incidentMetrics
	incidents *incidentCollector
}

func opts(name, help string) prometheus.Opts {
	return prometheus.Opts{Namespace: metrics.Namespace, Subsystem: subsystem, Name: name, Help: help}
}

func newServiceMetrics(s *Service) *serviceMetrics {
	m := &serviceMetrics{
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts(opts("transitions_total",
			"Changes of a node's served state, by the new state and what decided it: agent (its own report), central_deadline (no report by D + clock_skew_allowance), unreachable (dead or left), decode_error, no_state, unknown_state. A node's first sight is not counted.")),
			[]string{"to", "cause"}),
		downLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "deadline_to_down_seconds",
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
		state:           newStateCollector(s),
		nodes:           newNodeCollector(s),
		incidentMetrics: newIncidentMetrics(),
		incidents:       newIncidentCollector(s),
	}
	if s.opts.Host != nil {
		m.stateDir = metrics.NewStateDirCollector(subsystem, s.opts.Host)
	}
	for _, tc := range transitionCauses {
		m.transitions.WithLabelValues(tc[0], tc[1])
	}
	for _, why := range []string{probeDeadline, probeGone} {
		for _, r := range []string{"answered", "unanswered"} {
			m.probes.WithLabelValues(why, r)
		}
	}
	for _, what := range []string{"member", "message", "handover", "forget", "unseen", "stale", "future_start", "cause"} {
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
	return m
}

// collectors returns every collector of m.
func (m *serviceMetrics) collectors() []prometheus.Collector {
	cs := []prometheus.Collector{m.transitions, m.downLatency, m.actuatorRuns, m.watchersDropped, m.refused, m.probes, m.stateWrites, m.logSuppressed,
		m.state, m.nodes,
		m.incidentsOpened, m.incidentsClosed, m.incidentResumes, m.incidents}
	if m.stateDir != nil {
		cs = append(cs, m.stateDir)
	}
	return cs
}

// actuatorRun counts one run of an actuator command (actuators.onRun).
func (m *serviceMetrics) actuatorRun(on string, err error) {
	r := resultSuccess
	switch {
	case errors.Is(err, runcmd.ErrTimedOut):
		r = resultTimeout
	case err != nil:
		r = resultFailure
	}
	m.actuatorRuns.WithLabelValues(on, r).Inc()
}

// transition counts a node's change of served state and, for a down by a
// grace violation, observes the time from its deadline D to now.
func (m *serviceMetrics) transition(to view.State, cause string, d time.Time, now time.Time) {
	m.transitions.WithLabelValues(string(to), cause).Inc()
	if !d.IsZero() {
		m.downLatency.Observe(now.Sub(d).Seconds())
	}
}

// stateCollector reads the Service's view, watchers, leadership and mesh
// at scrape time.
type stateCollector struct {
	s                                        *Service
	nodes, watchers, leader, joined, members *prometheus.Desc
}

func newStateCollector(s *Service) *stateCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, subsystem, name), help, labels, nil)
	}
	return &stateCollector{
		s:        s,
		nodes:    d("nodes", "Nodes by served state.", "state"),
		watchers: d("watchers", "Watchers of /v1/watch connected."),
		leader:   d("actuator_leader", "1 while this aggregator runs the actuators (the live one with the lowest name)."),
		joined:   d("mesh_joined", "1 once the mesh's first join completed."),
		members:  d("mesh_members", "Mesh members seen (agents and aggregators, this one included), by liveness.", "status"),
	}
}

var _ prometheus.Collector = (*stateCollector)(nil)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.nodes, c.watchers, c.leader, c.joined, c.members} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	counts := make(map[view.State]int, len(view.States))
	s.mu.RLock()
	for _, n := range s.view {
		counts[n.State]++
	}
	watchers, lowest, m := len(s.subs), s.leader == s.opts.Name, s.mesh
	s.mu.RUnlock()
	for _, st := range view.States {
		ch <- prometheus.MustNewConstMetric(c.nodes, prometheus.GaugeValue, float64(counts[st]), string(st))
	}
	ch <- prometheus.MustNewConstMetric(c.watchers, prometheus.GaugeValue, float64(watchers))
	members := map[mesh.Status]int{}
	joined := false
	if m != nil {
		joined = m.Joined()
		for _, mb := range m.Members() {
			members[mb.Status]++
		}
	}
	// As updateLeadership decides: the lowest live name, once joined.
	ch <- prometheus.MustNewConstMetric(c.leader, prometheus.GaugeValue, boolValue(lowest && joined))
	ch <- prometheus.MustNewConstMetric(c.joined, prometheus.GaugeValue, boolValue(joined))
	for _, st := range []mesh.Status{mesh.StatusAlive, mesh.StatusSuspect, mesh.StatusDead, mesh.StatusLeft} {
		ch <- prometheus.MustNewConstMetric(c.members, prometheus.GaugeValue, float64(members[st]), string(st))
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
