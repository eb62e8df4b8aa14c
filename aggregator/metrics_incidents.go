package aggregator

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gracewatch/gracewatch/aggregator/incident"
	"github.com/gracewatch/gracewatch/internal/metrics"
)

// incidentMetrics are the families of the incidents, the blast-radius
// limit and the clock sanity. No node name is a label: an incident's
// series has its id, kind and cause (bounded by incident.MaxOpen open
// incidents, and each cause by agent/report's field bounds), so that an
// alert fires once per incident with its cause and node count.
type incidentMetrics struct {
	incidentsOpened prometheus.Counter
	incidentsClosed prometheus.Counter
	incidentResumes *prometheus.CounterVec
}

func newIncidentMetrics() *incidentMetrics {
	m := &incidentMetrics{
		incidentsOpened: prometheus.NewCounter(prometheus.CounterOpts(opts("incidents_opened_total",
			"Incidents opened: groups of DOWN nodes that share a cause (a file system, a wait channel; docs/DESIGN.md §5b)."))),
		incidentsClosed: prometheus.NewCounter(prometheus.CounterOpts(opts("incidents_closed_total",
			"Incidents closed: their last node came back."))),
		incidentResumes: prometheus.NewCounterVec(prometheus.CounterOpts(opts("incident_resumes_total",
			"Nodes of a shared incident resumed by [incidents] auto_resume once their agent verified them clean, by result.")),
			[]string{"result"}),
	}
	for _, r := range []string{resultSuccess, resultFailure} {
		m.incidentResumes.WithLabelValues(r)
	}
	return m
}

// incidentCollector reads the incidents, the limit and the clocks at
// scrape time.
type incidentCollector struct {
	s                                     *Service
	nodes, clean, held, open, limit, used *prometheus.Desc
	heldAll, skewed                       *prometheus.Desc
}

func newIncidentCollector(s *Service) *incidentCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, subsystem, name), help, labels, nil)
	}
	return &incidentCollector{
		s: s,
		nodes: d("incident_nodes", "Nodes of each open incident, by its id (this aggregator's), kind and cause (\"fuse.hangfs gracewatch-hangfs on /mnt/x\", \"wait channel request_wait_answer\"). At most 256 open incidents.",
			"incident", "kind", "cause"),
		clean: d("incident_clean_nodes", "Nodes of each open incident that their agent verified clean (every process of the violation gone).",
			"incident", "kind", "cause"),
		held: d("incident_held_drains", "Drains of each open incident's nodes held by the blast-radius limit (on the actuator leader).",
			"incident", "kind", "cause"),
		open:    d("incidents_open", "Open incidents, by kind.", "kind"),
		limit:   d("drain_limit", "Nodes the on=\"down\" actuators may drain within the limit's window without an administrator (0: no limit)."),
		used:    d("drain_limit_used", "Drains within the limit's window that still hold a slot (their node has not come back)."),
		heldAll: d("drains_held", "Drains held by the blast-radius limit, waiting for a slot or an administrator's confirmation (aggregator incident confirm ID)."),
		skewed:  d("clock_skewed_nodes", "Nodes whose clock disagrees with this aggregator's by more than the allowance (policy.clock_skew_allowance, at least 1 s), as measured from the send time of their messages."),
	}
}

// Describe implements prometheus.Collector.
func (c *incidentCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.nodes, c.clean, c.held, c.open, c.limit, c.used, c.heldAll, c.skewed} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *incidentCollector) Collect(ch chan<- prometheus.Metric) {
	incs, lim := c.s.Incidents()
	byKind := map[incident.Kind]int{}
	for _, inc := range incs {
		if !inc.Open() {
			continue
		}
		byKind[inc.Cause.Kind]++
		labels := []string{strconv.FormatUint(inc.ID, 10), string(inc.Cause.Kind), inc.Cause.String()}
		ch <- prometheus.MustNewConstMetric(c.nodes, prometheus.GaugeValue, float64(len(inc.Nodes)), labels...)
		ch <- prometheus.MustNewConstMetric(c.clean, prometheus.GaugeValue, float64(len(inc.Clean)), labels...)
		ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(len(lim.Held[inc.ID])), labels...)
	}
	for _, k := range incident.Kinds {
		ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(byKind[k]), string(k))
	}
	ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(lim.Limit))
	ch <- prometheus.MustNewConstMetric(c.used, prometheus.GaugeValue, float64(lim.Used))
	ch <- prometheus.MustNewConstMetric(c.heldAll, prometheus.GaugeValue, float64(lim.HeldCount))
	c.s.inc.mu.RLock()
	skewed := len(c.s.inc.skewed)
	c.s.inc.mu.RUnlock()
	ch <- prometheus.MustNewConstMetric(c.skewed, prometheus.GaugeValue, float64(skewed))
}
