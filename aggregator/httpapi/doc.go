// Package httpapi is the aggregator's HTTP edge: the server of the HTTP API
// that proto/openapi.yaml describes, with its bearer-token rules (auth.go),
// the watch stream (sse.go), the status page (ui.go), the bounds on
// connections (listener.go, conns.go) and its request metrics.
//
// The server asks the aggregator only what the small Service interface
// lists (http_service.go), and converts the view's nodes to the API's
// types (wire.go, over package aggregator/api). It imports none of the
// mesh's wire types: package aggregator implements Service with an adapter
// that turns requests into them and classifies the Service's errors by the
// status they are answered with (Failure, errors.go).
package httpapi
