package mesh

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gracewatch/gracewatch/internal/metrics"
)

// meshCollector serves the mesh's metrics, read from the Mesh at scrape
// time (Options.Registry):
//
//   - gracewatch_mesh_members: the members this one keeps (of every
//     status), against its bound gracewatch_mesh_members_max;
//   - gracewatch_mesh_aggregators{gossip}: the aggregators of the book
//     (book.go), "alive" or "lost" (memberlist says dead or left, or its
//     proof expired: still reached directly);
//   - gracewatch_mesh_refused_total{reason}: alive messages refused
//     (alive.go) and address conflicts memberlist refused;
//   - gracewatch_mesh_messages_dropped_total{reason}: direct messages
//     dropped before the Handler, undecodable or unproven (their log lines
//     are rate-limited);
//   - gracewatch_mesh_log_lines_suppressed_total: lines about one member
//     held back by its budget (log.go).
//
// Safe for concurrent use; it takes the Mesh's lock for a count.
type meshCollector struct{ m *Mesh }

var (
	membersDesc = prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, "mesh", "members"),
		"Members this one keeps in its table, of every status (this one included).", nil, nil)
	membersMaxDesc = prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, "mesh", "members_max"),
		"The bound of the member table: past it new names are refused.", nil, nil)
	aggregatorsDesc = prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, "mesh", "aggregators"),
		"Aggregators this member knows from their signed metas, by what gossip says: alive, or lost (dead or left in memberlist's word, or its proof expired); a lost one is still reached directly.",
		[]string{"gossip"}, nil)
	refusedDesc = prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, "mesh", "refused_total"),
		"Alive messages of memberlist's failure detector refused, by reason: invalid_name, table_full, aggregator_meta (an aggregator without its signed meta, or an unsigned claim of the role), address_takeover, address_conflict, merge_too_large, self_meta; and inbound streams closed at once for their peer's bound (streams_per_peer) or the bound of all peers (streams_total), or dropped for the bytes the open streams hold (stream_bytes).",
		[]string{"reason"}, nil)
	droppedDesc = prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, "mesh", "messages_dropped_total"),
		"Direct messages dropped before they were handled, by reason: undecodable (not an envelope, over the size limit, an invalid sender name, addressed to another member) or unproven (a proof that does not verify, none where one is required, a replay, too old). Their log lines are rate-limited; this counts each.",
		[]string{"reason"}, nil)
	linesHeldDesc = prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, "mesh", "log_lines_suppressed_total"),
		"Log lines about one member (its departures and returns, an aggregator lost and found by gossip) held back past 10 a minute per member; each member's next line reports its count as suppressed.",
		nil, nil)
)

// Reasons of gracewatch_mesh_messages_dropped_total, indexes of Mesh.dropped.
const (
	droppedUndecodable = iota
	droppedUnproven
)

var droppedReasons = [...]string{droppedUndecodable: "undecodable", droppedUnproven: "unproven"}

func (c meshCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- membersDesc
	ch <- membersMaxDesc
	ch <- aggregatorsDesc
	ch <- refusedDesc
	ch <- droppedDesc
	ch <- linesHeldDesc
}

func (c meshCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	now := m.now()
	m.mu.Lock()
	members := len(m.members)
	m.mu.Unlock()
	alive, lost := 0, 0
	for _, a := range m.Aggregators() {
		if a.Lost(now) {
			lost++
		} else {
			alive++
		}
	}
	ch <- prometheus.MustNewConstMetric(membersDesc, prometheus.GaugeValue, float64(members))
	ch <- prometheus.MustNewConstMetric(membersMaxDesc, prometheus.GaugeValue, float64(m.maxMembers))
	ch <- prometheus.MustNewConstMetric(aggregatorsDesc, prometheus.GaugeValue, float64(alive), "alive")
	ch <- prometheus.MustNewConstMetric(aggregatorsDesc, prometheus.GaugeValue, float64(lost), "lost")
	for i, r := range refusalReasons {
		ch <- prometheus.MustNewConstMetric(refusedDesc, prometheus.CounterValue, float64(m.refused.n[i].Load()), r)
	}
	for i, r := range droppedReasons {
		ch <- prometheus.MustNewConstMetric(droppedDesc, prometheus.CounterValue, float64(m.dropped[i].Load()), r)
	}
	ch <- prometheus.MustNewConstMetric(linesHeldDesc, prometheus.CounterValue, float64(m.linesHeld.Load()))
}
