// Package apispec holds proto/openapi.yaml, the aggregator's HTTP API as it
// is described, for tests: it loads and validates the document once and
// checks real answers and JSON documents against it.
package apispec

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// spec is proto/openapi.yaml, loaded and validated once.
var spec struct {
	once   sync.Once
	doc    *openapi3.T
	router routers.Router
	err    error
}

func specPath() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "proto", "openapi.yaml")
}

// Load returns proto/openapi.yaml and a router over its paths; the test
// fails at once when the document cannot be loaded or is not valid.
func Load(t testing.TB) (*openapi3.T, routers.Router) {
	t.Helper()
	spec.once.Do(func() {
		// The watch stream and the status page are text; validate them
		// as such.
		openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.PlainBodyDecoder)
		openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromFile(specPath())
		if err != nil {
			spec.err = err
			return
		}
		if err := doc.Validate(context.Background()); err != nil {
			spec.err = err
			return
		}
		// Route by path only: the tests call a local server, not the
		// spec's server URL.
		doc.Servers = nil
		spec.doc = doc
		spec.router, spec.err = legacy.NewRouter(doc)
	})
	if spec.err != nil {
		t.Fatalf("proto/openapi.yaml: %v", spec.err)
	}
	return spec.doc, spec.router
}

// CheckResponse validates a real response (status, headers, body) against
// proto/openapi.yaml: the status must be documented for the route.
func CheckResponse(t testing.TB, req *http.Request, status int, header http.Header, body []byte) {
	t.Helper()
	_, router := Load(t)
	route, params, err := router.FindRoute(req)
	if err != nil {
		t.Fatalf("%s %s: not in the spec: %v", req.Method, req.URL.Path, err)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 status,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Errorf("%s %s → %d does not match proto/openapi.yaml: %v\nbody: %s", req.Method, req.URL, status, err, body)
	}
}

// CheckSchema validates a JSON document against a schema of the spec.
func CheckSchema(t testing.TB, name string, data []byte) {
	t.Helper()
	doc, _ := Load(t)
	ref := doc.Components.Schemas[name]
	if ref == nil {
		t.Fatalf("no schema %s", name)
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if err := ref.Value.VisitJSON(v, openapi3.MultiErrors()); err != nil {
		t.Errorf("%s does not match the schema: %v\n%s", name, err, data)
	}
}

// Response is an answer as Call read it.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// ErrorMsg is the message of r's error body ({"error": "..."}); the test
// fails at once when r's body is not one.
func (r Response) ErrorMsg(t testing.TB) string {
	t.Helper()
	var eb struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(r.Body, &eb); err != nil || eb.Error == "" {
		t.Fatalf("not an error body: %s", r.Body)
	}
	return eb.Error
}

// Call makes a real request, with token as its bearer token and body as
// its JSON body when they are not empty, reads the answer within timeout
// and validates it against proto/openapi.yaml (CheckResponse).
func Call(t testing.TB, timeout time.Duration, method, url, token, body string) Response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	hc := &http.Client{Timeout: timeout}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	CheckResponse(t, req, resp.StatusCode, resp.Header, b)
	return Response{resp.StatusCode, resp.Header, b}
}
