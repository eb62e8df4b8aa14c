package aggregator

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3filter"
)

func init() {
	// The status page is text; validate it as such against the spec.
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
}

// urlAttr matches the attributes of the page that make a browser fetch or
// follow something.
var urlAttr = regexp.MustCompile(`(?i)\b(src|href|action|formaction|poster|srcset)\s*=\s*("[^"]*"|'[^']*'|[^\s>]+)`)

func TestStatusPage(t *testing.T) {
	h := newHarness(t)
	base := h.serve(ServerOptions{})

	r := call(t, "GET", base+"/", "", "")
	if r.status != http.StatusOK {
		t.Fatalf("GET /: %d %s", r.status, r.body)
	}
	for k, want := range map[string]string{
		"Content-Type":           "text/html; charset=utf-8",
		"Cache-Control":          "no-store",
		"X-Content-Type-Options": "nosniff",
		"Referrer-Policy":        "no-referrer",
	} {
		if got := r.header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	page := string(r.body)
	if !strings.HasPrefix(page, "<!doctype html>") || !strings.Contains(page, "/v1/watch") {
		t.Errorf("not the status page: %.200s", page)
	}

	// No external asset: no absolute URL anywhere (not even in the script),
	// and every URL attribute local.
	for _, scheme := range []string{"http://", "https://", "//fonts.", "@import"} {
		if strings.Contains(page, scheme) {
			t.Errorf("the page holds %q", scheme)
		}
	}
	attrs := urlAttr.FindAllStringSubmatch(page, -1)
	for _, m := range attrs {
		v := strings.Trim(m[2], `"'`)
		if v != "data:," && !(strings.HasPrefix(v, "/") && !strings.HasPrefix(v, "//")) {
			t.Errorf("%s=%q: not local", m[1], v)
		}
	}
	if len(attrs) == 0 {
		t.Error("found no URL attribute at all; is the pattern still right?")
	}

	// The policy allows exactly the inline script and style, and nothing
	// from elsewhere.
	csp := r.header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "connect-src 'self'", "base-uri 'none'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
	for _, tag := range []string{"script", "style"} {
		_, rest, ok := strings.Cut(page, "<"+tag+">")
		body, _, ok2 := strings.Cut(rest, "</"+tag+">")
		if !ok || !ok2 {
			t.Fatalf("no inline <%s>", tag)
		}
		sum := sha256.Sum256([]byte(body))
		if h := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"; !strings.Contains(csp, tag+"-src "+h) {
			t.Errorf("Content-Security-Policy %q does not allow the inline %s (%s)", csp, tag, h)
		}
	}
	if strings.Contains(page, "innerHTML") || strings.Contains(page, "outerHTML") || strings.Contains(page, "insertAdjacentHTML") {
		t.Error("the page writes markup from strings; use textContent")
	}

	// HEAD, other methods and other paths.
	req, _ := http.NewRequest("HEAD", base+"/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ContentLength != int64(len(r.body)) {
		t.Errorf("HEAD /: %d, length %d, want 200, %d", resp.StatusCode, resp.ContentLength, len(r.body))
	}
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{"POST", "/", http.StatusMethodNotAllowed},
		{"GET", "/index.html", http.StatusNotFound},
		{"GET", "/v1/", http.StatusNotFound},
	} {
		req, _ := http.NewRequest(c.method, base+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: %d %s, want %d JSON", c.method, c.path, resp.StatusCode, resp.Header.Get("Content-Type"), c.status)
		}
	}
}

// TestStatusPageReadToken: the page is a read route. It answers as
// /v1/nodes does for every configuration and bearer token, and also takes
// the token as ?token=, since a browser cannot send the header when it opens
// a page.
func TestStatusPageReadToken(t *testing.T) {
	h := newHarness(t)
	servers := []struct {
		name string
		opts ServerOptions
	}{
		{"read_token", ServerOptions{Token: []byte(testToken), ReadToken: true}},
		{"admin token only", ServerOptions{Token: []byte(testToken)}},
		{"no token", ServerOptions{}},
		{"read_token without a token", ServerOptions{ReadToken: true}},
	}
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			base := h.serve(srv.opts)
			for _, tok := range []string{"", testToken, "wrong-token-0123456789"} {
				page := call(t, "GET", base+"/", tok, "")
				nodes := call(t, "GET", base+"/v1/nodes", tok, "")
				if page.status != nodes.status {
					t.Errorf("token %q: / answers %d, /v1/nodes %d", tok, page.status, nodes.status)
				}
				if page.status == http.StatusUnauthorized && page.header.Get("WWW-Authenticate") == "" {
					t.Errorf("token %q: 401 without WWW-Authenticate", tok)
				}
				if tok == "" {
					continue
				}
				q := call(t, "GET", base+"/?token="+tok, "", "")
				if q.status != nodes.status {
					t.Errorf("?token=%s: / answers %d, /v1/nodes with the header %d", tok, q.status, nodes.status)
				}
			}
		})
	}

	base := h.serve(ServerOptions{Token: []byte(testToken), ReadToken: true})
	if r := call(t, "GET", base+"/?token=", "", ""); r.status != http.StatusUnauthorized {
		t.Errorf("empty ?token=: %d, want 401", r.status)
	}
	// The header, when given, is the one checked.
	if r := call(t, "GET", base+"/?token="+testToken, "wrong-token-0123456789", ""); r.status != http.StatusUnauthorized {
		t.Errorf("a wrong header with a right ?token=: %d, want 401", r.status)
	}
	// The token opens the page only: the API still wants the header.
	if r := call(t, "GET", base+"/v1/nodes?token="+testToken, "", ""); r.status == http.StatusOK {
		t.Errorf("/v1/nodes?token= answers 200")
	}
}

func TestContentSecurityPolicy(t *testing.T) {
	for _, c := range []struct {
		name, page, err string
	}{
		{"ok", "<style>a{}</style><script>1</script><script>2</script>", ""},
		{"no script", "<style>a{}</style>", "no inline <script>"},
		{"no style", "<script>1</script>", "no inline <style>"},
		{"unclosed", "<style>a{}</style><script>1", "<script> without </script>"},
	} {
		t.Run(c.name, func(t *testing.T) {
			csp, err := contentSecurityPolicy([]byte(c.page))
			if c.err != "" {
				if err == nil || err.Error() != c.err {
					t.Fatalf("err = %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(csp, "'sha256-"); n != 3 {
				t.Errorf("%d hashes in %q, want 3", n, csp)
			}
		})
	}
}
