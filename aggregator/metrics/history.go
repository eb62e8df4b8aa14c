package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gracewatch/gracewatch/aggregator/history"
)

// historyCollector exports the teardown history's gauges and counters at
// scrape time: no node, job or user label.
type historyCollector struct {
	stats                                     func() history.Stats
	now                                       func() time.Time
	records, bytes, oldest, segments, corrupt *prometheus.Desc
	refused, usersDropped, droppedSegments    *prometheus.Desc
}

// NewHistoryCollector returns the collector of the teardown history's
// figures, read from stats (history.Store.Stats) at scrape time; now is
// the Service's clock. Register it when the history is on.
func NewHistoryCollector(stats func() history.Stats, now func() time.Time) prometheus.Collector {
	return &historyCollector{stats: stats, now: now,
		records:         desc("history_records", "Released teardowns kept in the teardown history."),
		bytes:           desc("history_bytes", "Bytes of the teardown history's segment files (bounded by history.max_bytes)."),
		oldest:          desc("history_oldest_record_age_seconds", "Age of the oldest teardown kept in the history (bounded by history.max_age); 0 when empty."),
		segments:        desc("history_segments", "Segment files of the teardown history."),
		corrupt:         desc("history_corrupt_segments", "Segments found damaged at start: read up to the damage, never appended to (the log names them)."),
		refused:         desc("history_refused_total", "Released teardowns not recorded, by reason: duplicate (a resend), rate (over the node's bound), clock_step (released before it started), future (released more than 1h ahead), too_old, invalid, bounds (a grace past 7 days, or self-ended and longer than 8 days), write_error.", "reason"),
		usersDropped:    desc("history_users_dropped_total", "User names dropped (recorded as unknown) for breaking the rule of Teardown.user."),
		droppedSegments: desc("history_dropped_segments_total", "Oldest segments dropped for the bounds, by bound: bytes or age.", "bound"),
	}
}

// Describe implements prometheus.Collector.
func (c *historyCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.records, c.bytes, c.oldest, c.segments, c.corrupt, c.refused, c.usersDropped, c.droppedSegments} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *historyCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	g := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	k := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	g(c.records, float64(st.Records))
	g(c.bytes, float64(st.Bytes))
	age := 0.0
	if st.OldestStartMs > 0 {
		age = max(c.now().Sub(time.UnixMilli(st.OldestStartMs)).Seconds(), 0)
	}
	g(c.oldest, age)
	g(c.segments, float64(st.Segments))
	g(c.corrupt, float64(st.Corrupt))
	for _, r := range history.Refusals {
		k(c.refused, st.Refused[r], string(r))
	}
	k(c.usersDropped, st.UsersDropped)
	k(c.droppedSegments, st.DroppedBytes, "bytes")
	k(c.droppedSegments, st.DroppedAge, "age")
}
