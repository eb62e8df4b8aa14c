package aggregator

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

// handleUI serves the status page. It is a read route: with
// ServerOptions.ReadToken it wants the token, as /v1/nodes does. A browser
// cannot send an Authorization header when it opens a page, so the page
// also takes the token as the query parameter token (/?token=...); the page
// then sends it as a bearer token on its own requests, reading the watch
// with fetch instead of EventSource, which cannot send headers. The token
// in the URL ends up in the browser's history: with read_token on, prefer a
// dedicated read-only deployment or a reverse proxy that adds the header.
func (s *Server) handleUI(w http.ResponseWriter, r *http.Request) {
	if tok := r.URL.Query().Get("token"); tok != "" && r.Header.Get("Authorization") == "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+tok)
	}
	if !s.authorize(w, r, read) {
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
