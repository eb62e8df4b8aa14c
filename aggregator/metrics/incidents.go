package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gracewatch/gracewatch/aggregator/incident"
)

// incidentCollector reads the incidents, the blast-radius limit and the
// clock sanity at scrape time (Source). No node name is a label: an
// incident's series has its id, kind and cause (bounded by
// incident.MaxOpen open incidents, and each cause by agent/report's field
// bounds), so that an alert fires once per incident with its cause and
// node count.
type incidentCollector struct {
	src                                   Source
	nodes, clean, held, open, limit, used *prometheus.Desc
	heldAll, skewed                       *prometheus.Desc
}

func newIncidentCollector(src Source) *incidentCollector {
	return &incidentCollector{
		src: src,
		nodes: desc("incident_nodes", "Nodes of each open incident, by its id (this aggregator's), kind and cause (\"fuse.hangfs gracewatch-hangfs on /mnt/x\", \"wait channel request_wait_answer\"). At most 256 open incidents.",
			"incident", "kind", "cause"),
		clean: desc("incident_clean_nodes", "Nodes of each open incident that their agent verified clean (every process of the violation gone).",
			"incident", "kind", "cause"),
		held: desc("incident_held_drains", "Drains of each open incident's nodes held by the blast-radius limit (on the actuator leader).",
			"incident", "kind", "cause"),
		open:    desc("incidents_open", "Open incidents, by kind.", "kind"),
		limit:   desc("drain_limit", "Nodes the on=\"down\" actuators may drain within the limit's window without an administrator (0: no limit)."),
		used:    desc("drain_limit_used", "Drains within the limit's window that still hold a slot (their node has not come back)."),
		heldAll: desc("drains_held", "Drains held by the blast-radius limit, waiting for a slot or an administrator's confirmation (aggregator incident confirm ID)."),
		skewed:  desc("clock_skewed_nodes", "Nodes whose clock disagrees with this aggregator's by more than the allowance (policy.clock_skew_allowance, at least 1 s), as measured from the send time of their messages."),
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
	incs, lim := c.src.Incidents()
	gauge := func(d *prometheus.Desc, value float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, value, labels...)
	}
	byKind := map[incident.Kind]int{}
	for _, inc := range incs {
		if !inc.Open() {
			continue
		}
		byKind[inc.Cause.Kind]++
		labels := []string{strconv.FormatUint(inc.ID, 10), string(inc.Cause.Kind), inc.Cause.String()}
		gauge(c.nodes, float64(len(inc.Nodes)), labels...)
		gauge(c.clean, float64(len(inc.Clean)), labels...)
		gauge(c.held, float64(len(lim.Held[inc.ID])), labels...)
	}
	for _, k := range incident.Kinds {
		gauge(c.open, float64(byKind[k]), string(k))
	}
	gauge(c.limit, float64(lim.Limit))
	gauge(c.used, float64(lim.Used))
	gauge(c.heldAll, float64(lim.HeldCount))
	gauge(c.skewed, float64(c.src.ClockSkewed()))
}
