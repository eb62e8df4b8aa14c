package httpapi

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/testutil/apispec"
	"github.com/gracewatch/gracewatch/internal/testutil/doccheck"
)

// servedRoutes returns the routes a Server registers (with /metrics), by
// "METHOD PATH" as the documents write them ("/{$}" is "/"), with their
// access.
func servedRoutes(t *testing.T) map[string]string {
	t.Helper()
	// A fake Service: the routes take its method values, none is called.
	srv := NewServer(newFakeService(clock.NewFake(t0)), ServerOptions{Registry: prometheus.NewRegistry()})
	routes := map[string]string{}
	for _, rt := range srv.Routes() {
		path := rt.Path
		if path == "/{$}" {
			path = "/"
		}
		routes[rt.Method+" "+path] = rt.Access
	}
	if len(routes) == 0 {
		t.Fatal("the server registers no route")
	}
	return routes
}

// specAccess is the access an operation of proto/openapi.yaml states by
// its security requirements: "public" for {} alone, "admin" for the admin
// token alone, "read" for the document's default (none, the read or the
// admin token).
func specAccess(doc *openapi3.T, op *openapi3.Operation) string {
	sec := doc.Security
	if op.Security != nil {
		sec = *op.Security
	}
	var names []string
	for _, req := range sec {
		if len(req) == 0 {
			names = append(names, "none")
		}
		names = append(names, slices.Sorted(maps.Keys(req))...)
	}
	switch strings.Join(names, ",") {
	case "none":
		return "public"
	case "adminToken":
		return "admin"
	case "none,readToken,adminToken":
		return "read"
	}
	return "security " + strings.Join(names, ",")
}

// TestRoutesAreTheSpec: every route the server registers is an operation
// of proto/openapi.yaml with the same access, and every operation of the
// spec is a registered route.
func TestRoutesAreTheSpec(t *testing.T) {
	doc, _ := apispec.Load(t)
	served := servedRoutes(t)
	spec := map[string]string{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			spec[method+" "+path] = specAccess(doc, op)
		}
	}
	for _, r := range slices.Sorted(maps.Keys(served)) {
		acc, ok := spec[r]
		switch {
		case !ok:
			t.Errorf("%s is registered (aggregator/httpapi/http.go, routes) but is not in proto/openapi.yaml", r)
		case acc != served[r]:
			t.Errorf("%s: proto/openapi.yaml's security says %s, the server registers it %s", r, acc, served[r])
		}
	}
	for _, r := range slices.Sorted(maps.Keys(spec)) {
		if _, ok := served[r]; !ok {
			t.Errorf("%s is in proto/openapi.yaml but the server does not register it (aggregator/httpapi/http.go, routes)", r)
		}
	}
}

// readmeRoutes returns the routes ("METHOD PATH") of the code spans that
// open a cell of the lines for which in says true, by line.
func readmeRoutes(t *testing.T, readme *doccheck.Doc, from, to int, cell func(line string) (string, bool)) map[string]int {
	t.Helper()
	routes := map[string]int{}
	for i := from; i < to; i++ {
		c, ok := cell(readme.Lines[i])
		if !ok {
			continue
		}
		for _, span := range doccheck.CodeSpans(c) {
			method, path, ok := strings.Cut(span, " ")
			if !ok || strings.ToUpper(method) != method || !strings.HasPrefix(path, "/") {
				t.Errorf("%s: %q is not a route (want `METHOD /path`)", readme.At(i), span)
				continue
			}
			routes[span] = i
		}
	}
	return routes
}

// TestREADMERouteTable: README.md's table of the HTTP API has a row for
// every route the server registers, and none for a route it does not.
func TestREADMERouteTable(t *testing.T) {
	readme := doccheck.Read(t, "README.md")
	from, to, ok := readme.Section("aggregator")
	if !ok {
		t.Fatal("README.md has no section \"aggregator\" (the HTTP API's table)")
	}
	table := readmeRoutes(t, readme, from, to, func(l string) (string, bool) {
		if !strings.HasPrefix(l, "| `") {
			return "", false
		}
		cells := strings.Split(l, "|")
		return cells[1], true
	})
	checkDocRoutes(t, readme, "the HTTP API's table (section \"aggregator\")", table, servedRoutes(t), "")
}

// TestREADMETokenLists: README.md's lists of the admin, read and open
// routes are the access the server registers each route with (auth.go's
// rules).
func TestREADMETokenLists(t *testing.T) {
	readme := doccheck.Read(t, "README.md")
	served := servedRoutes(t)
	for _, list := range []struct{ access, prefix string }{
		{"admin", "- admin routes"},
		{"read", "- read routes"},
		{"public", "- open routes"},
	} {
		lines := readmeRoutes(t, readme, 0, len(readme.Lines), func(l string) (string, bool) {
			return l, strings.HasPrefix(l, list.prefix)
		})
		if len(lines) == 0 {
			t.Errorf("README.md has no line starting %q (the routes of access %s)", list.prefix, list.access)
			continue
		}
		checkDocRoutes(t, readme, "the list \""+list.prefix+"\"", lines, served, list.access)
	}
}

// checkDocRoutes fails t for each route of served (of access acc; any when
// acc is empty) that doc's routes lack, and for each of doc's routes that
// served lacks (or has with another access).
func checkDocRoutes(t *testing.T, readme *doccheck.Doc, where string, doc map[string]int, served map[string]string, acc string) {
	t.Helper()
	for _, r := range slices.Sorted(maps.Keys(served)) {
		if _, ok := doc[r]; !ok && (acc == "" || served[r] == acc) {
			t.Errorf("%s: %s lacks `%s`, which the server registers (access %s; aggregator/httpapi/http.go, routes)", readme.Name, where, r, served[r])
		}
	}
	for _, r := range slices.Sorted(maps.Keys(doc)) {
		switch got, ok := served[r]; {
		case !ok:
			t.Errorf("%s: `%s` in %s is not a route the server registers (aggregator/httpapi/http.go, routes)", readme.At(doc[r]), r, where)
		case acc != "" && got != acc:
			t.Errorf("%s: `%s` in %s: the server registers it with access %s", readme.At(doc[r]), r, where, got)
		}
	}
}
