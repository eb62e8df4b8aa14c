package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gracewatch/gracewatch/internal/hostinfo"
)

// stateDirTimeout bounds the read of a scrape (hostinfo.Reader bounds it
// too): a statfs of a state dir on a hung file system must not hold up the
// scrape.
const stateDirTimeout = 2 * time.Second

// HostFunc returns the node's facts (hostinfo.Reader.Read); it must return
// within a bounded time.
type HostFunc func(ctx context.Context) hostinfo.Facts

// NewStateDirCollector returns the collector of
// gracewatch_<subsystem>_state_dir_free_bytes and _state_dir_size_bytes,
// read through read at scrape time: the free bytes of the file system that
// holds the program's state dir (what an unprivileged writer may still
// write, statfs f_bavail) and its size. They feed the full-state-disk alert
// (packaging/examples/prometheus). When the facts cannot be read, the two
// series are left out of the scrape and
// gracewatch_<subsystem>_state_dir_read_ok is 0.
func NewStateDirCollector(subsystem string, read HostFunc) prometheus.Collector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, subsystem, name), help, nil, nil)
	}
	return &stateDirCollector{
		read: read,
		free: d("state_dir_free_bytes", "Free bytes of the file system of the state dir, for an unprivileged writer (statfs f_bavail)."),
		size: d("state_dir_size_bytes", "Size in bytes of the file system of the state dir."),
		ok:   d("state_dir_read_ok", "1 when the state dir's free space could be read at this scrape, else 0."),
	}
}

type stateDirCollector struct {
	read           HostFunc
	free, size, ok *prometheus.Desc
}

func (c *stateDirCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.free
	ch <- c.size
	ch <- c.ok
}

func (c *stateDirCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), stateDirTimeout)
	defer cancel()
	f := c.read(ctx)
	if f.StateDirSizeBytes == 0 {
		ch <- prometheus.MustNewConstMetric(c.ok, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.free, prometheus.GaugeValue, float64(f.StateDirFreeBytes))
	ch <- prometheus.MustNewConstMetric(c.size, prometheus.GaugeValue, float64(f.StateDirSizeBytes))
	ch <- prometheus.MustNewConstMetric(c.ok, prometheus.GaugeValue, 1)
}
