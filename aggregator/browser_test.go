package aggregator

// The headless browser of the status page's tests (ui_browser_test.go).

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// browser is a headless Chromium with one tab, for one test.
type browser struct {
	t   *testing.T
	tab context.Context

	mu       sync.Mutex
	problems []string  // exceptions and CSP violations the page reported
	requests []request // every request the page made, in order
}

// request is one request the browser sent, as Chromium's network events
// report it.
type request struct {
	Method, URL, Authorization string
}

// newBrowser starts Chromium (skipping the test outside CI when there is
// none) and stops it, and every goroutine of chromedp, at the test's end.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	st, err := os.Stat(*chromiumPath)
	testutil.Require(t, err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0,
		fmt.Sprintf("needs Chromium at %s (apt-get install chromium, or -chromium=PATH)", *chromiumPath))

	root, cancelRoot := context.WithTimeout(context.Background(), browserTimeout)
	alloc, cancelAlloc := chromedp.NewExecAllocator(root,
		chromedp.ExecPath(*chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true), // containers have a small /dev/shm
		chromedp.Flag("force-color-profile", "srgb"), // the same colours on every machine
		chromedp.Flag("password-store", "basic"),     // no keyring over D-Bus
		chromedp.UserDataDir(t.TempDir()),
		// Chromium puts its singleton socket in a folder of TMPDIR, which
		// it does not remove: one of the test's own, removed after it
		// (short: a socket path has at most 107 bytes).
		chromedp.Env("TMPDIR="+shortTempDir(t)),
		chromedp.WindowSize(1280, 860),
	)
	tab, cancelTab := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	b := &browser{t: t, tab: tab}
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc() // waits for the browser to exit
		cancelRoot()
	})
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("starting %s: %v", *chromiumPath, err)
	}

	// Subscribe before the page loads so that nothing is missed.
	if err := chromedp.Listen(tab, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok && e.Request != nil {
			auth, _ := e.Request.Headers["Authorization"].(string)
			b.mu.Lock()
			b.requests = append(b.requests, request{e.Request.Method, e.Request.URL + e.Request.URLFragment, auth})
			b.mu.Unlock()
		}
	}); err != nil {
		t.Fatalf("listening to the network: %v", err)
	}
	messages := chromedp.Console(tab)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.IsException() || strings.Contains(m.Text, "Content Security Policy") {
				b.mu.Lock()
				b.problems = append(b.problems, m.String())
				b.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { <-done }) // runs before the cancels above: cancel first
	t.Cleanup(cancelTab)
	return b
}

// run runs actions with a bounded context.
func (b *browser) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.tab, browserStep)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// waitFor waits until the JavaScript expression is true.
func (b *browser) waitFor(what, expr string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.tab, browserStep)
	defer cancel()
	var err error
	for {
		_, err = chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr,
			chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(browserStep)))
		// Right after a navigation the poll may still be sent to the old
		// page's JavaScript context, which is gone: the new page's comes
		// with its own event, later on a busy machine. Asked again.
		if err == nil || ctx.Err() != nil || !navigating(err) {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err != nil {
		b.t.Fatalf("waiting for %s: %v\npage: %+v", what, err, b.page())
	}
}

// navigating reports whether err is the browser's answer to a script sent
// to a JavaScript context that a navigation destroyed.
func navigating(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Cannot find context with specified id") || strings.Contains(msg, "Execution context was destroyed")
}

// checkProblems fails the test for every exception or CSP violation the
// page reported.
func (b *browser) checkProblems() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		b.t.Errorf("the page reported: %s", p)
	}
}

// sent returns the requests the page made so far.
func (b *browser) sent() []request {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.requests)
}

// pageView is what the test reads of the page's DOM.
type pageView struct {
	Stream    string            `json:"stream"`
	Snapshots int               `json:"snapshots"`
	Events    int               `json:"events"`
	Banner    string            `json:"banner"`
	Title     string            `json:"title"`
	Agg       string            `json:"agg"`
	Ready     string            `json:"ready"`
	Counts    map[string]int    `json:"counts"`
	Tiles     []tileView        `json:"tiles"`
	Down      []rowView         `json:"down"`
	Teardown  []rowView         `json:"teardown"`
	Announced string            `json:"announced"`
	Legend    string            `json:"legend"`
	Injected  int               `json:"injected"`
	Attrs     map[string]string `json:"attrs"`
}

type tileView struct {
	Name   string `json:"name"`
	State  string `json:"state"`
	Class  string `json:"class"`
	Letter string `json:"letter"`
	Title  string `json:"title"`
}

type rowView struct {
	Name     string `json:"name"`
	Text     string `json:"text"`
	Datetime string `json:"datetime"`
}

const pageViewJS = `(() => {
  const all = (s) => [...document.querySelectorAll(s)];
  const text = (id) => document.getElementById(id).textContent;
  const rows = (id) => all('#' + id + ' tbody tr').map((tr) => ({
    name: tr.dataset.name, text: tr.innerText.replace(/\s+/g, ' ').trim(),
    datetime: (tr.querySelector('time') || { getAttribute: () => '' }).getAttribute('datetime') || '' }));
  const s = document.getElementById('stream');
  const banner = document.getElementById('banner');
  return {
    stream: s.dataset.state, snapshots: +s.dataset.snapshots, events: +s.dataset.events,
    banner: banner.hidden ? '' : banner.textContent, title: document.title,
    agg: text('agg-name'), ready: document.getElementById('ready').dataset.state,
    counts: Object.fromEntries(['total', 'up', 'teardown', 'down', 'unreachable'].map((k) => [k, +text('n-' + k)])),
    tiles: all('#grid .tile').map((li) => ({ name: li.dataset.name, state: li.dataset.state, class: li.className,
      letter: li.querySelector('.l').textContent, title: li.title })),
    down: rows('down-list'), teardown: rows('teardown-list'),
    announced: text('down-live'),
    legend: document.querySelector('.legend').innerText.replace(/\s+/g, ' ').trim(),
    injected: all('main img, main script, main b, main i:not(.prog i)').length,
    attrs: { downLive: document.querySelector('#down [aria-live]') ? document.querySelector('#down [aria-live]').getAttribute('aria-live') : '' },
  };
})()`

func (b *browser) page() pageView {
	ctx, cancel := context.WithTimeout(b.tab, browserStep)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[pageView](pageViewJS))
	if err != nil {
		b.t.Fatalf("reading the page: %v", err)
	}
	return v
}
