package aggregator

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/httpapi"
	"github.com/gracewatch/gracewatch/internal/metrics"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// testReadToken is the read token of the tests, testToken the admin one.
const testReadToken = "r3ad-token-0123456789"

// TestTokenRules: every endpoint under every token configuration, asked
// with no token, the read token, the admin token and a wrong one, over
// real HTTP on loopback. A status past authorization (200, 404, 409, 400)
// is the handler's own: it shows that the token was let through.
func TestTokenRules(t *testing.T) {
	reg := metrics.NewRegistry(metrics.ProgramAggregator)
	h := newHarness(t, func(o *Options) { o.Registry = reg })
	h.member("n1", upMeta(1, 1)) // its report's detail is served or not
	h.member("n2", upMeta(1, 1)) // the admin actions act on it
	h.update("n1", &gwpb.StateUpdate{Meta: upMeta(1, 1),
		Reports: []*gwpb.Report{{Job: "5", Summary: "1 unkillable", TakenMs: ms(t0), DetailJson: []byte(`{"job":"5","processes":[]}`)}}})
	ackControls(h.mesh, func(node string, c *gwpb.Control) *gwpb.Meta { return upMeta(1, 2) }, "")
	expiration := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)

	type endpoint struct {
		method, path, body string
		admin              bool
		ok                 int // the handler's answer once authorized
	}
	endpoints := []endpoint{
		{"GET", "/v1/nodes", "", false, 200},
		{"GET", "/v1/nodes/n1", "", false, 200},
		{"GET", "/v1/watch", "", false, 200},
		{"GET", "/v1/config", "", false, 200},
		{"GET", "/metrics", "", false, 200},
		{"POST", "/v1/nodes/n2/resume", `{"reason":"fixed"}`, true, 200},
		{"POST", "/v1/nodes/n2/drain", `{"reason":"maintenance"}`, true, 200},
		{"POST", "/v1/nodes/n1/forget", `{"reason":"gone"}`, true, 409}, // n1 is alive
		{"POST", "/v1/jobs", `{"job":"7","nodes":"n2","expiration":"` + expiration + `"}`, true, 200},
	}
	// Always public, whatever the configuration and the token.
	public := []endpoint{
		{"GET", "/healthz", "", false, 200},
		{"GET", "/readyz", "", false, 200},
		{"GET", "/", "", false, 200},
	}
	const wrong = "wrong-token-0123456789"
	tokens := []struct{ name, token string }{{"no token", ""}, {"read token", testReadToken}, {"admin token", testToken}, {"wrong token", wrong}}

	type config struct {
		name         string
		opts         httpapi.ServerOptions
		readsGuarded bool
	}
	configs := []config{
		{"read and admin tokens", httpapi.ServerOptions{Token: []byte(testToken), ReadToken: []byte(testReadToken)}, true},
		{"admin token only", httpapi.ServerOptions{Token: []byte(testToken)}, false},
		{"read_token with the admin token only", httpapi.ServerOptions{Token: []byte(testToken), GuardReads: true}, true},
		{"read token only", httpapi.ServerOptions{ReadToken: []byte(testReadToken)}, true},
		{"no token", httpapi.ServerOptions{}, false},
	}
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			c.opts.Registry = reg
			base := h.serve(c.opts)
			hasAdmin, hasRead := len(c.opts.Token) > 0, len(c.opts.ReadToken) > 0
			for _, e := range append(endpoints, public...) {
				for _, tok := range tokens {
					isAdmin := hasAdmin && tok.token == testToken
					isRead := hasRead && tok.token == testReadToken
					want := e.ok
					switch {
					case e.path == "/healthz" || e.path == "/readyz" || e.path == "/":
					case e.admin && !hasAdmin:
						want = http.StatusForbidden // admin endpoints disabled
					case e.admin && isRead:
						want = http.StatusForbidden // the read token on an admin endpoint
					case e.admin && !isAdmin:
						want = http.StatusUnauthorized
					case !e.admin && c.readsGuarded && !isAdmin && !isRead:
						want = http.StatusUnauthorized
					}
					got, hdr, body := status(t, e.method, base+e.path, tok.token, e.body)
					if got != want {
						t.Errorf("%s %s with %s: %d, want %d: %s", e.method, e.path, tok.name, got, want, body)
						continue
					}
					switch {
					case got == http.StatusUnauthorized && hdr.Get("WWW-Authenticate") == "":
						t.Errorf("%s %s with %s: 401 without WWW-Authenticate", e.method, e.path, tok.name)
					case got == http.StatusForbidden && isRead && hasAdmin && !strings.Contains(body, "needs the admin token (http.admin_token_file); this is the read token"):
						t.Errorf("%s %s with the read token: 403 says %s", e.method, e.path, body)
					case got == http.StatusForbidden && !hasAdmin && !strings.Contains(body, "no http.admin_token_file"):
						t.Errorf("%s %s without an admin token configured: 403 says %s", e.method, e.path, body)
					}
					// The detail of a report: to the read or the admin
					// token only, whether or not the reads need a token.
					if e.path == "/v1/nodes/n1" && got == 200 {
						var n api.Node
						if err := json.Unmarshal([]byte(body), &n); err != nil || n.LastReport == nil {
							t.Fatalf("GET /v1/nodes/n1: %v: %s", err, body)
						}
						if gotDetail := n.LastReport.Detail != nil; gotDetail != (isAdmin || isRead) {
							t.Errorf("GET /v1/nodes/n1 with %s: detail %v, want %v: %s", tok.name, gotDetail, isAdmin || isRead, body)
						}
					}
				}
			}
		})
	}
}

// status makes a real request and answers its status, headers and body; a
// watch stream's body is not read (it never ends), only its headers. Other
// responses are validated against the spec.
func status(t *testing.T, method, url, token, body string) (int, http.Header, string) {
	t.Helper()
	if !strings.HasSuffix(url, "/v1/watch") {
		r := call(t, method, url, token, body)
		return r.status, r.header, string(r.body)
	}
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: testTimeout}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == 200 {
		return resp.StatusCode, resp.Header, ""
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}
