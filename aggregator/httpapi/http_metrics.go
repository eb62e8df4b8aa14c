package httpapi

// The HTTP requests' metrics: gracewatch_aggregator_http_requests_total by
// route, method and status.

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gracewatch/gracewatch/internal/metrics"
)

// subsystem is the metrics' subsystem, the aggregator's.
const subsystem = "aggregator"

func opts(name, help string) prometheus.Opts {
	return prometheus.Opts{Namespace: metrics.Namespace, Subsystem: subsystem, Name: name, Help: help}
}

// newRequestsCounter returns gracewatch_aggregator_http_requests_total,
// registered in reg (or the one already there) when reg is not nil.
func newRequestsCounter(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	cv := prometheus.NewCounterVec(prometheus.CounterOpts(opts("http_requests_total",
		"HTTP requests answered, by route pattern (unmatched: no route), method and status code. A watch counts when its stream ends.")),
		[]string{"route", "method", "code"})
	return registerCounterVec(reg, cv)
}

// registerCounterVec registers cv with reg (nil: none), or returns the
// one of the same name already registered there (several servers of one
// aggregator share it).
func registerCounterVec(reg prometheus.Registerer, cv *prometheus.CounterVec) (*prometheus.CounterVec, error) {
	if reg == nil {
		return cv, nil
	}
	if err := reg.Register(cv); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return cv, err
		}
		cv = are.ExistingCollector.(*prometheus.CounterVec)
	}
	return cv, nil
}

// routeLabel is the path of the route pattern that served r ("GET
// /v1/nodes/{name}" → "/v1/nodes/{name}"), never the request's own path;
// "unmatched" for the catch-all and for the mux's own redirects.
func routeLabel(r *http.Request) string {
	p := r.Pattern
	if i := strings.IndexByte(p, ' '); i >= 0 {
		p = p[i+1:]
	}
	if p == "" || p == "/" {
		return "unmatched"
	}
	return p
}

// methodLabel bounds the method label: a client may send any token.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return m
	}
	return "other"
}

// statusRecorder remembers the status code of a response. Unwrap lets
// http.ResponseController reach the connection's Flush and deadlines (the
// watch stream needs them).
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.code == 0 && code >= 200 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusRecorder) status() string {
	if w.code == 0 {
		return strconv.Itoa(http.StatusOK)
	}
	return strconv.Itoa(w.code)
}
