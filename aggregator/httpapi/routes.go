package httpapi

import "slices"

// Route is one route of the HTTP API as a Server registered it.
type Route struct {
	Method string // "GET", "POST"
	// Path is the pattern of net/http's ServeMux ("/v1/nodes/{name}";
	// "/{$}" is the root alone).
	Path string
	// Access is who may call it: "public" (never a token), "read" (the
	// read or the admin token, when reads are guarded) or "admin" (the
	// admin token).
	Access string
}

// Routes returns the routes s serves, in the order it registered them:
// what proto/openapi.yaml and README.md describe (the tests hold them to
// it). /metrics is among them only with ServerOptions.Registry.
func (s *Server) Routes() []Route { return slices.Clone(s.table) }

// String is the name of the access level, as README.md says it.
func (a access) String() string {
	switch a {
	case public:
		return "public"
	case read:
		return "read"
	case admin:
		return "admin"
	}
	return "unknown"
}
