// Package metrics holds what gracewatch's two programs share for their
// Prometheus metrics: a registry of their own (never the global
// DefaultRegisterer) with the Go, process and build_info collectors, and the
// /metrics handler. The programs' own metrics live beside what they measure
// (agent/metrics.go, aggregator/metrics.go).
//
// Conventions (docs/DESIGN.md §6): every name starts with Namespace, values
// are in base units (seconds, bytes), counters end in _total, and no label
// takes an unbounded set of values: never a job id, a pid or a reason. A
// node name is a label only of the aggregator's per-node families
// (gracewatch_aggregator_node_*, one series per node, bounded by the
// cluster's size), which the alerting rules need to name the node.
package metrics

import (
	"log/slog"
	"net/http"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gracewatch/gracewatch/internal/version"
)

// Namespace prefixes every gracewatch metric.
const Namespace = "gracewatch"

// Programs, the values of build_info's program label.
const (
	ProgramNodeagent  = "nodeagent"
	ProgramAggregator = "aggregator"
)

// NewRegistry returns a new registry for program holding the Go runtime's
// and the process's collectors and gracewatch_build_info{version,
// goversion, program} = 1.
func NewRegistry(program string) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		BuildInfo(program),
	)
	return reg
}

// BuildInfo returns the gracewatch_build_info gauge of program: always 1,
// its labels say which build runs.
func BuildInfo(program string) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace,
		Name:      "build_info",
		Help:      "Always 1; the labels name the gracewatch version, the Go version it was built with, and the program.",
		ConstLabels: prometheus.Labels{
			"version":   version.Version,
			"goversion": runtime.Version(),
			"program":   program,
		},
	})
	g.Set(1)
	return g
}

// Handler serves g's metrics in the Prometheus exposition formats. A
// collector that fails is logged and left out; the rest is served (as
// node_exporter does). It is safe for concurrent use.
func Handler(g prometheus.Gatherer, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
		// A scrape gathers everything once; two at a time are plenty.
		MaxRequestsInFlight: 4,
	})
}
