package agent

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gracewatch/gracewatch/agent/diagnose"
	"github.com/gracewatch/gracewatch/agent/procfs"
	"github.com/gracewatch/gracewatch/agent/teardown"
	"github.com/gracewatch/gracewatch/internal/metrics"
)

const subsystem = "agent"

// Label values, each set fixed: the agent's metrics carry no job id, pid or
// node name.
var (
	teardownOutcomes = []string{"clean", "exited", diagnose.OutcomeTerminated, diagnose.OutcomeKilled, diagnose.OutcomeHung}
	escalationSigs   = []string{"SIGTERM", "SIGKILL"}
	epilogueResults  = []string{"success", "failure", "signaled", "start_error"}
	nodeStates       = []teardown.NodeState{teardown.StateUp, teardown.StateTeardown, teardown.StateDown}
	hungClasses      = []diagnose.Class{diagnose.Unkillable, diagnose.ExitHang, diagnose.KillableD, diagnose.Missed, diagnose.Dying, diagnose.Zombie}
)

// teardownBuckets answer "how many teardowns took longer than G" for any G
// from a second to a day: below a second 0.1, 0.25 and 0.5 (an epilogue
// that exits at once), then bounds at most 1.5 times apart up to 86,400 s,
// so every G lies within a factor of 1.5 of a bound, and the round grace
// periods a site picks (5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 240, 300,
// 450, 600, 900 s, 20 min, 30 min, 45 min, 1 h, 90 min, 2 h, 3 h, 4 h,
// 6 h, 8 h, 12 h, 18 h, 1 d) are bounds themselves. The same metric is a
// native histogram as well (teardownNativeFactor): about 9% resolution
// everywhere, for a Prometheus that scrapes native histograms.
var teardownBuckets = []float64{0.1, 0.25, 0.5,
	1, 1.5, 2, 3, 4, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 240, 300, 450, 600, 900, 1200, 1800, 2700,
	3600, 5400, 7200, 10800, 14400, 21600, 28800, 43200, 64800, 86400}

// teardownNativeFactor is the native histogram's bucket growth (schema 3:
// 2^(1/8), about 1.09); at most teardownNativeMaxBuckets buckets, which
// cover 1 ms to a day at that schema (a histogram past it halves its
// resolution rather than grow).
const (
	teardownNativeFactor     = 1.1
	teardownNativeMaxBuckets = 200
)

// agentMetrics are the node agent's gracewatch_agent_* metrics. They are
// fed by the supervisor's hooks, which run on its main loop: onChange with
// every status (node state, latch, hung processes, active teardowns) and
// onEvent with every event (registrations, violations, escalations,
// releases, epilogue exits). The /proc reader's counters are read at scrape
// time. Its methods are safe for concurrent use and never block.
type agentMetrics struct {
	reg *prometheus.Registry

	jobs             prometheus.Counter
	graceMismatches  prometheus.Counter
	violations       prometheus.Counter
	teardowns        *prometheus.CounterVec
	teardownDuration prometheus.Histogram
	escalations      *prometheus.CounterVec
	epilogues        *prometheus.CounterVec
	activeTeardowns  prometheus.Gauge
	nodeState        *prometheus.GaugeVec
	downLatched      prometheus.Gauge
	hung             *prometheus.GaugeVec
	stateWrites      prometheus.Counter
	stateFailing     prometheus.Gauge
	running          *runningCollector
	proc             *procCollector       // nil without a /proc reader
	stateDir         prometheus.Collector // nil without a host reader
}

// newAgentMetrics returns the metrics, registered in reg (which also gets
// the /proc reader's collector when proc is not nil, and the state dir's
// free space, read through host at scrape time, when host is not nil).
func newAgentMetrics(reg *prometheus.Registry, proc *procfs.Reader, maxBlocked int, host metrics.HostFunc) *agentMetrics {
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: metrics.Namespace, Subsystem: subsystem, Name: name, Help: help}
	}
	m := &agentMetrics{
		reg: reg,
		jobs: prometheus.NewCounter(prometheus.CounterOpts(opts("jobs_registered_total",
			"Jobs registered (job start, or an epilogue for an unknown job)."))),
		graceMismatches: prometheus.NewCounter(prometheus.CounterOpts(opts("grace_mismatches_total",
			"Jobs registered whose scheduler plans with another grace G than the job's (Flux: the gracewatch jobtap plugin's [gracewatch] grace against [teardown] grace): the node is drained at another time than the plan says it is free."))),
		violations: prometheus.NewCounter(prometheus.CounterOpts(opts("grace_violations_total",
			"Teardowns not done by their deadline D, in either mode (observe mode signals none of them: escalations_total counts the signals)."))),
		teardowns: prometheus.NewCounterVec(prometheus.CounterOpts(opts("teardowns_total",
			"Teardowns ended (released), by outcome: clean (by D), exited (after D, before a signal), terminated (after SIGTERM), killed (after SIGKILL), hung (outlived unkillable_after).")),
			[]string{"outcome"}),
		teardownDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: subsystem, Name: "teardown_duration_seconds",
			Help:                           "Time from min(T_end, E) (the teardown deadline D less the grace G) to the release of the teardown: over G means overdue for a grace G. Observed at release; gracewatch_agent_teardown_running_seconds has those still running.",
			Buckets:                        teardownBuckets,
			NativeHistogramBucketFactor:    teardownNativeFactor,
			NativeHistogramMaxBucketNumber: teardownNativeMaxBuckets,
		}),
		escalations: prometheus.NewCounterVec(prometheus.CounterOpts(opts("escalations_total",
			"Escalation steps taken on overdue teardowns, by signal.")), []string{"signal"}),
		epilogues: prometheus.NewCounterVec(prometheus.CounterOpts(opts("epilogues_total",
			"Epilogues started by this agent that ended, by result: success (exit 0), failure (another exit code), signaled (killed by a signal), start_error (never started).")),
			[]string{"result"}),
		activeTeardowns: prometheus.NewGauge(prometheus.GaugeOpts(opts("active_teardowns",
			"Teardowns in progress (within grace or overdue)."))),
		nodeState: prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("node_state",
			"The node's state: 1 for the current one, 0 for the others.")), []string{"state"}),
		downLatched: prometheus.NewGauge(prometheus.GaugeOpts(opts("down_latched",
			"1 while the node's DOWN latch is held (a grace violation or a drain, until resumed)."))),
		hung: prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("hung_processes",
			"Processes of overdue teardowns in the latest diagnosis, by class.")), []string{"class"}),
		stateWrites: prometheus.NewCounter(prometheus.CounterOpts(opts("state_write_failures_total",
			"Writes of the state file (registrations, teardown clocks, the latch) that failed, e.g. on a full state dir; the agent goes on from memory."))),
		stateFailing: prometheus.NewGauge(prometheus.GaugeOpts(opts("state_write_failing",
			"1 while the latest write of the state file failed: a restart of the agent would lose every change since."))),
	}
	for _, v := range teardownOutcomes {
		m.teardowns.WithLabelValues(v)
	}
	for _, v := range escalationSigs {
		m.escalations.WithLabelValues(v)
	}
	for _, v := range epilogueResults {
		m.epilogues.WithLabelValues(v)
	}
	for _, c := range hungClasses {
		m.hung.WithLabelValues(string(c))
	}
	m.running = newRunningCollector(time.Now)
	m.onChange(teardown.Status{State: teardown.StateUp})
	if proc != nil {
		m.proc = newProcCollector(proc, maxBlocked)
	}
	if host != nil {
		m.stateDir = metrics.NewStateDirCollector(subsystem, host)
	}
	reg.MustRegister(m.collectors()...)
	return m
}

// collectors returns every collector of m.
func (m *agentMetrics) collectors() []prometheus.Collector {
	cs := []prometheus.Collector{m.jobs, m.graceMismatches, m.violations, m.teardowns, m.teardownDuration, m.escalations, m.epilogues,
		m.activeTeardowns, m.nodeState, m.downLatched, m.hung, m.stateWrites, m.stateFailing, m.running}
	if m.proc != nil {
		cs = append(cs, m.proc)
	}
	if m.stateDir != nil {
		cs = append(cs, m.stateDir)
	}
	return cs
}

// onChange sets the gauges from a status (teardown.Options.OnChange).
func (m *agentMetrics) onChange(st teardown.Status) {
	for _, s := range nodeStates {
		v := 0.0
		if s == st.State {
			v = 1
		}
		m.nodeState.WithLabelValues(string(s)).Set(v)
	}
	if st.State == teardown.StateDown {
		m.downLatched.Set(1)
	} else {
		m.downLatched.Set(0)
	}
	active := 0
	for _, j := range st.Jobs {
		if j.Phase == teardown.PhaseTeardown || j.Phase == teardown.PhaseOverdue {
			active++
		}
	}
	m.activeTeardowns.Set(float64(active))
	m.running.set(st)
	counts := make(map[string]int, len(hungClasses))
	for _, h := range st.Hung {
		counts[h.Class]++
	}
	for _, c := range hungClasses {
		m.hung.WithLabelValues(string(c)).Set(float64(counts[string(c)]))
	}
}

// onEvent counts an event (teardown.Options.OnEvent).
func (m *agentMetrics) onEvent(ev teardown.Event) {
	switch ev.Kind {
	case teardown.EventRegistered:
		m.jobs.Inc()
	case teardown.EventGraceMismatch:
		m.graceMismatches.Inc()
	case teardown.EventOverdue:
		m.violations.Inc()
	case teardown.EventEscalation:
		m.escalations.WithLabelValues(ev.Signal).Inc()
	case teardown.EventReleased:
		m.teardowns.WithLabelValues(ev.Outcome).Inc()
		m.teardownDuration.Observe(ev.Duration.Seconds())
	case teardown.EventEpilogExited:
		switch {
		case ev.Signaled:
			m.epilogues.WithLabelValues("signaled").Inc()
		case ev.Status == 0:
			m.epilogues.WithLabelValues("success").Inc()
		default:
			m.epilogues.WithLabelValues("failure").Inc()
		}
	case teardown.EventEpilogStartError:
		m.epilogues.WithLabelValues("start_error").Inc()
	case teardown.EventStateWriteError:
		m.stateWrites.Inc()
		m.stateFailing.Set(1)
	case teardown.EventStateWriteRecovered:
		m.stateFailing.Set(0)
	}
}

// procCollector reads the /proc reader's counters at scrape time.
type procCollector struct {
	proc       *procfs.Reader
	maxBlocked int

	blocked, max, reads, timeouts, refused *prometheus.Desc
}

func newProcCollector(proc *procfs.Reader, maxBlocked int) *procCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, subsystem, name), help, nil, nil)
	}
	return &procCollector{
		proc:       proc,
		maxBlocked: maxBlocked,
		blocked: d("proc_blocked_reads",
			"Reads of /proc that did not return within read_timeout and are still outstanding (each holds a thread)."),
		max: d("proc_blocked_reads_max",
			"The bound on outstanding blocked reads (max_blocked_reads); beyond it reads are refused."),
		reads:    d("proc_reads_total", "Reads of /proc started for diagnostics."),
		timeouts: d("proc_read_timeouts_total", "Reads of /proc that did not return within read_timeout."),
		refused:  d("proc_reads_refused_total", "Reads of /proc refused because max_blocked_reads were outstanding."),
	}
}

var _ prometheus.Collector = (*procCollector)(nil)

func (c *procCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.blocked, c.max, c.reads, c.timeouts, c.refused} {
		ch <- d
	}
}

func (c *procCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.proc.Stats()
	ch <- prometheus.MustNewConstMetric(c.blocked, prometheus.GaugeValue, float64(st.Blocked))
	ch <- prometheus.MustNewConstMetric(c.max, prometheus.GaugeValue, float64(c.maxBlocked))
	ch <- prometheus.MustNewConstMetric(c.reads, prometheus.CounterValue, float64(st.Reads))
	ch <- prometheus.MustNewConstMetric(c.timeouts, prometheus.CounterValue, float64(st.Timeouts))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(st.Refused))
}

// runningCollector exports the teardowns still running as a histogram of
// their ages, computed at scrape time: gracewatch_agent_teardown_running_seconds,
// with the buckets of teardown_duration_seconds, so that "over G" is the
// completed ones over G plus the running ones over G (_count less
// _bucket{le="G"}). It is a snapshot (a gauge histogram in OpenMetrics'
// terms): its buckets go down as teardowns end, so it is read as it is,
// never through rate() or increase(). A running teardown's age is the time
// since min(T_end, E), its deadline less its grace, as the completed ones';
// a job still running past its E counts from E. Its methods are safe for
// concurrent use.
type runningCollector struct {
	desc *prometheus.Desc
	now  func() time.Time

	mu    sync.Mutex
	bases []time.Time // of the teardowns running, as of the latest status
}

func newRunningCollector(now func() time.Time) *runningCollector {
	return &runningCollector{
		desc: prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, subsystem, "teardown_running_seconds"),
			"Teardowns running now (within grace or overdue, and jobs running past E), by how long since min(T_end, E): a snapshot taken at scrape time, not a counter (no rate() or increase()).",
			nil, nil),
		now: now,
	}
}

// set keeps the clocks of st's running teardowns.
func (c *runningCollector) set(st teardown.Status) {
	var bases []time.Time
	for _, j := range st.Jobs {
		if j.Phase == teardown.PhaseReleased || j.Deadline.IsZero() {
			continue
		}
		// A running job is torn down from its E on (D = E + G); a job
		// without E is not yet.
		bases = append(bases, j.Deadline.Add(-j.Grace))
	}
	c.mu.Lock()
	c.bases = bases
	c.mu.Unlock()
}

var _ prometheus.Collector = (*runningCollector)(nil)

func (c *runningCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *runningCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.now()
	c.mu.Lock()
	bases := c.bases
	c.mu.Unlock()
	buckets := make(map[float64]uint64, len(teardownBuckets))
	for _, b := range teardownBuckets {
		buckets[b] = 0
	}
	var count uint64
	var sum float64
	for _, base := range bases {
		age := now.Sub(base).Seconds()
		if age < 0 {
			continue // a running job before its E
		}
		count++
		sum += age
		for _, b := range teardownBuckets {
			if age <= b {
				buckets[b]++
			}
		}
	}
	ch <- prometheus.MustNewConstHistogram(c.desc, count, sum, buckets)
}
