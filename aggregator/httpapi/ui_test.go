package httpapi

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// urlAttr matches the attributes of the page that make a browser fetch or
// follow something.
var urlAttr = regexp.MustCompile(`(?i)\b(src|href|action|formaction|poster|srcset)\s*=\s*("[^"]*"|'[^']*'|[^\s>]+)`)

func TestStatusPage(t *testing.T) {
	h := newHarness(t)
	base := h.serve(ServerOptions{})

	r := call(t, "GET", base+"/", "", "")
	if r.Status != http.StatusOK {
		t.Fatalf("GET /: %d %s", r.Status, r.Body)
	}
	for k, want := range map[string]string{
		"Content-Type":           "text/html; charset=utf-8",
		"Cache-Control":          "no-store",
		"X-Content-Type-Options": "nosniff",
		"Referrer-Policy":        "no-referrer",
	} {
		if got := r.Header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	page := string(r.Body)
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
	csp := r.Header.Get("Content-Security-Policy")
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
	if resp.StatusCode != 200 || resp.ContentLength != int64(len(r.Body)) {
		t.Errorf("HEAD /: %d, length %d, want 200, %d", resp.StatusCode, resp.ContentLength, len(r.Body))
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

// TestStatusPageTokens: the page's HTML holds no data, so it needs no
// token under any configuration (the page asks for the token and reads the
// API with it, TestStatusPageInBrowser); and a token in its URL, which it
// once took, is refused with a note on where it goes now, never used.
func TestStatusPageTokens(t *testing.T) {
	h := newHarness(t)
	for _, srv := range []struct {
		name string
		opts ServerOptions
	}{
		{"read and admin tokens", ServerOptions{Token: []byte(testToken), ReadToken: []byte(testReadToken)}},
		{"read_token with the admin token", ServerOptions{Token: []byte(testToken), GuardReads: true}},
		{"admin token only", ServerOptions{Token: []byte(testToken)}},
		{"no token", ServerOptions{}},
	} {
		t.Run(srv.name, func(t *testing.T) {
			base := h.serve(srv.opts)
			for _, tok := range []string{"", testReadToken, testToken, "wrong-token-0123456789"} {
				if r := call(t, "GET", base+"/", tok, ""); r.Status != http.StatusOK || !strings.Contains(string(r.Body), `id="login-form"`) {
					t.Errorf("token %q: / answers %d", tok, r.Status)
				}
				for _, q := range []string{"?token=" + tok, "?a=1&token=" + tok} {
					r := call(t, "GET", base+"/"+q, "", "")
					if r.Status != http.StatusBadRequest || !strings.Contains(r.ErrorMsg(t), "type the token into the page") {
						t.Errorf("/%s: %d %s, want 400", q, r.Status, r.Body)
					}
					if tok != "" && strings.Contains(string(r.Body), tok) {
						t.Errorf("/%s: the answer repeats the token: %s", q, r.Body)
					}
				}
			}
		})
	}
}

// TestStatusPageReadsNoTokenFromItsURL: the page never reads its own URL
// for a token, and its form's input has no name, so even a submission the
// script did not stop (the CSP's form-action 'none' blocks it anyway)
// would carry nothing.
func TestStatusPageReadsNoTokenFromItsURL(t *testing.T) {
	for _, bad := range []string{"location.search", "URLSearchParams", "?token", "token="} {
		if strings.Contains(string(uiPage), bad) {
			t.Errorf("the page holds %q", bad)
		}
	}
	if regexp.MustCompile(`<input[^>]*\bname=`).Match(uiPage) {
		t.Error("an input of the page has a name: a form submission would carry it")
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
