package httpapi

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// The status page (GET /) is one HTML file with its CSS and JavaScript
// inline: no build step, no external asset, nothing fetched from elsewhere.
// It reads the same API as any client: /healthz and /readyz for the header,
// /v1/config for the grace, and /v1/watch for the nodes, live.
//
//go:embed ui/index.html
var uiFiles embed.FS

// uiPage is the page and uiCSP its Content-Security-Policy, which allows
// exactly the page's inline script and style (by hash) and connections to
// this origin: even a string from the API that the page failed to escape
// could neither run a script nor load anything.
var uiPage, uiCSP = mustUIPage()

func mustUIPage() ([]byte, string) {
	page, err := uiFiles.ReadFile("ui/index.html")
	if err != nil {
		panic(fmt.Sprintf("aggregator: embedded status page: %v", err))
	}
	csp, err := contentSecurityPolicy(page)
	if err != nil {
		panic(fmt.Sprintf("aggregator: embedded status page: %v", err))
	}
	return page, csp
}

// contentSecurityPolicy returns the policy of page: its inline <script> and
// <style> elements allowed by their SHA-256, everything else denied except
// connections to the page's own origin and data: images (the blank icon).
func contentSecurityPolicy(page []byte) (string, error) {
	scripts, err := inlineHashes(page, "script")
	if err != nil {
		return "", err
	}
	styles, err := inlineHashes(page, "style")
	if err != nil {
		return "", err
	}
	return "default-src 'none'; script-src " + scripts + "; style-src " + styles +
		"; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'", nil
}

// inlineHashes returns the CSP sources ('sha256-...') of the contents of
// every <tag> element of page, which must have at least one.
func inlineHashes(page []byte, tag string) (string, error) {
	open, closing := []byte("<"+tag+">"), []byte("</"+tag+">")
	var srcs []string
	for rest := page; ; {
		i := bytes.Index(rest, open)
		if i < 0 {
			break
		}
		rest = rest[i+len(open):]
		j := bytes.Index(rest, closing)
		if j < 0 {
			return "", fmt.Errorf("<%s> without </%s>", tag, tag)
		}
		sum := sha256.Sum256(rest[:j])
		srcs = append(srcs, "'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'")
		rest = rest[j+len(closing):]
	}
	if len(srcs) == 0 {
		return "", fmt.Errorf("no inline <%s>", tag)
	}
	return strings.Join(srcs, " "), nil
}

// handleUI serves the status page. Its HTML holds no data and is the same
// for everyone, so it needs no token: the page reads the API like any
// client, and where the read endpoints need a token it asks for one, keeps
// it in the tab's sessionStorage and sends it as Authorization on fetch
// (the watch too: EventSource cannot send headers). A token never goes in
// a URL, where it would land in the browser's history, proxies' logs and
// Referer headers: the query parameter token, which the page once took,
// is refused with 400 and a note that says where the token goes now.
//
// Why not a login form and a cookie: the cookie would be sent by the
// browser on every request, the admin POSTs included, so it would need a
// CSRF defence, an expiry and a logout; a header that only the page's own
// script sets has none of these problems, and the page's CSP (hashes only,
// connect-src 'self') keeps other scripts from reading sessionStorage.
func (s *Server) handleUI(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("token") {
		s.logAuth(r, "status page opened with ?token=, which is no longer read")
		s.writeError(w, http.StatusBadRequest, "the status page no longer takes the token in the URL (it lands in the browser's history and in logs): "+
			"open / and type the token into the page; and treat the token in this URL as leaked (replace it)")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(uiPage)))
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", uiCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	s.setWriteDeadline(w)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(uiPage)
}
