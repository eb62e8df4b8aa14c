package aggregator

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"image/png"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/gracewatch/gracewatch/aggregator/httpapi"
	"github.com/gracewatch/gracewatch/aggregator/meshfake"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

var (
	chromiumPath     = flag.String("chromium", "/usr/bin/chromium", "the Chromium that the status page's browser tests drive (Debian: apt-get install chromium)")
	updateScreenshot = flag.Bool("update-screenshot", false, "write the status page's screenshot to testdata/status-page.png")
)

const (
	// browserTimeout bounds a whole browser test, browserStep one wait in
	// it. Generous: CI machines are slow to start a browser.
	browserTimeout = 90 * time.Second
	browserStep    = 30 * time.Second
	screenshotFile = "status-page.png"
)

// restartable is the real HTTP server over a Service, which a test can stop
// and start again on the same address (to make the page reconnect).
type restartable struct {
	t    *testing.T
	svc  *Service
	opts httpapi.ServerOptions
	addr string

	srv  *httpapi.Server
	done chan error
}

func serveRestartable(t *testing.T, svc *Service, o httpapi.ServerOptions) *restartable {
	t.Helper()
	rs := &restartable{t: t, svc: svc, opts: o, addr: "127.0.0.1:0"}
	rs.start()
	t.Cleanup(rs.stop)
	return rs
}

func (rs *restartable) base() string { return "http://" + rs.addr }

func (rs *restartable) start() {
	rs.t.Helper()
	l, err := net.Listen("tcp", rs.addr)
	if err != nil {
		rs.t.Fatalf("listen on %s: %v", rs.addr, err)
	}
	rs.addr = l.Addr().String()
	rs.srv = httpapi.NewServer(edge{rs.svc}, rs.opts)
	rs.done = make(chan error, 1)
	go func() { rs.done <- rs.srv.Serve(l) }()
}

func (rs *restartable) stop() {
	if rs.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := rs.srv.Shutdown(ctx); err != nil {
		rs.t.Errorf("Shutdown: %v", err)
	}
	if err := <-rs.done; err != nil {
		rs.t.Errorf("Serve: %v", err)
	}
	rs.srv = nil
}

// statusCluster is the cluster the browser tests show: two partitions, a
// few nodes in every state. now is the fake clock's time, near the real
// one, so that relative times read as they would in production.
func statusCluster(h *harness, now time.Time) {
	meta := func(st gwpb.State, seq uint64, since time.Time) *gwpb.Meta {
		return &gwpb.Meta{Schema: 1, Role: gwpb.Role_ROLE_AGENT, Incarnation: 1, Seq: seq, State: st, SinceMs: since.UnixMilli()}
	}
	for i := 1; i <= 36; i++ {
		h.mesh.SetMember(meshfake.AgentMember(fmt.Sprintf("cn%02d", i), meta(gwpb.State_STATE_UP, 1, now.Add(-26*time.Hour)), now))
	}
	for i := 1; i <= 12; i++ {
		h.mesh.SetMember(meshfake.AgentMember(fmt.Sprintf("gpu%d", i), meta(gwpb.State_STATE_UP, 1, now.Add(-26*time.Hour)), now))
	}
	teardown := func(name, job string, started time.Time, grace time.Duration) {
		m := meta(gwpb.State_STATE_TEARDOWN, 2, started)
		free := started.Add(grace)
		m.DeadlineMs, m.FreeAtMs, m.Reason = free.UnixMilli(), free.UnixMilli(), "job "+job+" tearing down"
		h.mesh.SetMember(meshfake.AgentMember(name, m, now))
		h.mesh.Deliver(name, &gwpb.Envelope{Body: &gwpb.Envelope_State{State: &gwpb.StateUpdate{Meta: m,
			Teardowns: []*gwpb.Teardown{{Job: job, Phase: "teardown", EndedMs: started.UnixMilli(), DeadlineMs: free.UnixMilli(), GraceMs: grace.Milliseconds()}}}}})
	}
	teardown("cn07", "41871", now.Add(-48*time.Second), 4*time.Minute)
	teardown("gpu3", "41902", now.Add(-100*time.Second), 2*time.Minute)
	down := func(name string, since time.Time, reason string) {
		m := meta(gwpb.State_STATE_DOWN, 2, since)
		m.Reason = reason
		h.mesh.SetMember(meshfake.AgentMember(name, m, now))
	}
	down("cn12", now.Add(-7*time.Minute-12*time.Second), "job 41833 teardown exceeded grace 120s: 2 processes in D state (nfs)")
	down("gpu9", now.Add(-3*time.Hour-4*time.Minute), "drained by ops: Xid 79, GPU fell off the bus (ticket HW-2291)")
	dead := meshfake.AgentMember("cn33", meta(gwpb.State_STATE_UP, 1, now.Add(-26*time.Hour)), now.Add(-25*time.Minute))
	dead.Status = mesh.StatusDead
	h.mesh.SetMember(dead)
	h.sync()
}

// TestStatusPageInBrowser opens the status page in headless Chromium over
// the real HTTP server, checks what it shows, changes nodes through the
// fake mesh and checks that the page follows live, through a restart of the
// server (the page resumes with Last-Event-ID), and takes a screenshot.
// Without a read token the page watches with EventSource; with one, it
// asks for the token (refusing a wrong one with a message), then watches
// with fetch (EventSource cannot send the header). No request the page
// makes has a token in its URL; with the token, the data requests carry it
// as a header, and the page makes no admin request.
func TestStatusPageInBrowser(t *testing.T) {
	for _, c := range []struct {
		name       string
		opts       httpapi.ServerOptions
		screenshot bool
	}{
		{name: "EventSource", screenshot: true},
		{name: "fetch with the read token", opts: httpapi.ServerOptions{Token: []byte(testToken), ReadToken: []byte(testReadToken)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBrowser(t)
			now := time.Now().UTC().Truncate(time.Second)
			h := newHarnessClock(t, clock.NewFake(now))
			statusCluster(h, now)
			withToken := len(c.opts.ReadToken) > 0
			if withToken {
				// Strings from the API are text, never markup.
				m := &gwpb.Meta{Schema: 1, Role: gwpb.Role_ROLE_AGENT, Incarnation: 1, Seq: 2, State: gwpb.State_STATE_DOWN,
					SinceMs: now.Add(-time.Minute).UnixMilli(), Reason: `<img src=x onerror="document.title='pwned'"><b>bold</b>`}
				// A name cannot carry markup: the intake refuses it
				// (nodename); a reason can.
				h.mesh.SetMember(meshfake.AgentMember(`x"><script>document.title='pwned'</script>`, m, now))
				h.mesh.SetMember(meshfake.AgentMember("x-markup", m, now))
				h.sync()
			}
			c.opts.Logger = testLogger(t)
			c.opts.Clock = h.clk
			srv := serveRestartable(t, h.svc, c.opts)

			b.run("open the page", chromedp.Navigate(srv.base()+"/"))
			if withToken {
				b.login(testReadToken)
			}
			want := h.svc.Nodes()
			b.waitFor("the snapshot", fmt.Sprintf(`document.getElementById('stream').dataset.state === 'live' &&
				+document.getElementById('stream').dataset.snapshots === 1 && +document.getElementById('n-total').textContent === %d`, len(want)))
			// The header: /healthz and /readyz (public), /v1/config (a read
			// route: with read_token, the page sends the token).
			b.waitFor("the aggregator's name, readiness and grace", `document.getElementById('agg-name').textContent === 'agg-1' &&
				document.getElementById('ready').dataset.state === 'ok' && document.getElementById('agg-grace').textContent === '120 s'`)
			p := b.page()

			// The grid: every node, sorted by name (numbers in names in
			// numeric order), coloured and lettered by state.
			if len(p.Tiles) != len(want) {
				t.Fatalf("%d tiles, want %d", len(p.Tiles), len(want))
			}
			var names []string
			byState := map[string]int{}
			letters := map[string]string{"up": "U", "teardown": "T", "down": "D", "unreachable": "?"}
			for _, tile := range p.Tiles {
				names = append(names, tile.Name)
				byState[tile.State]++
				if tile.Class != "tile st-"+tile.State || tile.Letter != letters[tile.State] {
					t.Errorf("tile %s (%s): class %q, letter %q", tile.Name, tile.State, tile.Class, tile.Letter)
				}
				if n, _ := h.svc.Node(tile.Name); string(n.State) != tile.State || !strings.HasPrefix(tile.Title, n.Name+": "+string(n.State)) {
					t.Errorf("tile %s: state %s, title %q; the service says %s", tile.Name, tile.State, tile.Title, n.State)
				}
			}
			if i, j := slices.Index(names, "gpu2"), slices.Index(names, "gpu9"); i < 0 || names[i+1] != "gpu3" || j < 0 || names[j+1] != "gpu10" ||
				!slices.IsSorted(names[:36]) || names[0] != "cn01" {
				t.Errorf("tiles not in name order: %v", names)
			}
			wantDown := 2
			if withToken {
				wantDown = 3
			}
			if byState["up"] != 43 || byState["teardown"] != 2 || byState["down"] != wantDown || byState["unreachable"] != 1 {
				t.Errorf("tiles by state: %v", byState)
			}
			if p.Counts["total"] != len(want) || p.Counts["up"] != 43 || p.Counts["down"] != wantDown || p.Counts["unreachable"] != 1 {
				t.Errorf("summary: %v", p.Counts)
			}
			if p.Legend != "U up T teardown D down ? unreachable" {
				t.Errorf("legend %q", p.Legend)
			}

			// The DOWN list, newest first, with reasons; the teardowns with
			// their free_at.
			if len(p.Down) != wantDown || p.Down[wantDown-2].Name != "cn12" || p.Down[wantDown-1].Name != "gpu9" ||
				!strings.Contains(p.Down[wantDown-2].Text, "2 processes in D state (nfs)") ||
				!strings.Contains(p.Down[wantDown-2].Text, "7 min ago") {
				t.Errorf("down list: %+v", p.Down)
			}
			if p.Attrs["downLive"] != "polite" {
				t.Errorf("the down list has no aria-live region: %v", p.Attrs)
			}
			if len(p.Teardown) != 2 || p.Teardown[0].Name != "gpu3" || p.Teardown[1].Name != "cn07" {
				t.Fatalf("teardowns: %+v", p.Teardown)
			}
			cn07, _ := h.svc.Node("cn07")
			if p.Teardown[1].Datetime != cn07.FreeAt.Format(time.RFC3339Nano) ||
				!strings.Contains(p.Teardown[1].Text, cn07.FreeAt.Format("2006-01-02 15:04:05")+" UTC") ||
				!strings.Contains(p.Teardown[1].Text, "job 41871") || !strings.Contains(p.Teardown[1].Text, "in 3 min") {
				t.Errorf("teardown of cn07 (free at %v): %+v", cn07.FreeAt, p.Teardown[1])
			}
			if withToken {
				if p.Injected != 0 || p.Title == "pwned" || !strings.Contains(p.Down[0].Text, `<img src=x onerror=`) {
					t.Errorf("markup from the API reached the DOM: %d elements, title %q, row %+v", p.Injected, p.Title, p.Down[0])
				}
			}

			// Live: a node goes down; the page follows without a reload.
			h.member("cn03", &gwpb.Meta{Schema: 1, Role: gwpb.Role_ROLE_AGENT, Incarnation: 1, Seq: 2, State: gwpb.State_STATE_DOWN,
				SinceMs: now.UnixMilli(), Reason: "job 41900 teardown exceeded grace 120s: 1 unkillable process"})
			b.waitFor("cn03 down", `(() => { const t = document.querySelector('#grid .tile[data-name="cn03"]');
				const r = document.querySelector('#down-list tr[data-name="cn03"]');
				return t && t.classList.contains('st-down') && r && r.textContent.includes('1 unkillable process'); })()`)
			p = b.page()
			if p.Down[0].Name != "cn03" || p.Counts["down"] != wantDown+1 || !strings.HasPrefix(p.Title, fmt.Sprintf("(%d down) ", wantDown+1)) {
				t.Errorf("after cn03 went down: down %+v, counts %v, title %q", p.Down, p.Counts, p.Title)
			}
			if !strings.Contains(p.Announced, "cn03 is down: job 41900") {
				t.Errorf("not announced: %q", p.Announced)
			}
			if p.Snapshots != 1 || p.Events == 0 {
				t.Errorf("%d snapshots, %d events: want the change as an event", p.Snapshots, p.Events)
			}

			if c.screenshot {
				b.screenshot()
			}

			// The server goes away: the page says so and keeps the last
			// view; a change meanwhile arrives when it comes back, as a
			// missed event (Last-Event-ID), not a new snapshot.
			srv.stop()
			b.waitFor("the reconnecting state", `document.getElementById('stream').dataset.state === 'reconnecting' && !document.getElementById('banner').hidden`)
			if p := b.page(); !strings.Contains(p.Banner, "reconnecting") || len(p.Tiles) != len(want) {
				t.Errorf("while reconnecting: banner %q, %d tiles", p.Banner, len(p.Tiles))
			}
			h.member("cn03", &gwpb.Meta{Schema: 1, Role: gwpb.Role_ROLE_AGENT, Incarnation: 1, Seq: 3, State: gwpb.State_STATE_UP, SinceMs: now.UnixMilli()})
			srv.start()
			b.waitFor("cn03 up after the reconnection", `document.getElementById('stream').dataset.state === 'live' &&
				document.querySelector('#grid .tile[data-name="cn03"]').dataset.state === 'up' &&
				!document.querySelector('#down-list tr[data-name="cn03"]')`)
			if p := b.page(); p.Snapshots != 1 || p.Banner != "" {
				t.Errorf("after the reconnection: %d snapshots (want 1: resumed), banner %q", p.Snapshots, p.Banner)
			}
			if withToken {
				// The read token cannot drain from the page: the
				// aggregator refuses it (the page has no admin action).
				ctx, cancel := context.WithTimeout(b.tab, browserStep)
				defer cancel()
				r, err := chromedp.Run(ctx, chromedp.Evaluate[string](`fetch('/v1/nodes/cn01/drain', {method: 'POST',
					headers: {Authorization: 'Bearer ' + sessionStorage.getItem('gracewatch-token'), 'Content-Type': 'application/json'},
					body: '{"reason":"from the page"}'}).then((r) => r.status + ' ' + r.statusText)`, chromedp.EvalAwaitPromise))
				if err != nil || r != "403 Forbidden" {
					t.Errorf("a drain from the page with the read token: %q, %v; want 403", r, err)
				}
				if n, _ := h.svc.Node("cn01"); n.State != view.StateUp {
					t.Errorf("cn01 is %s after a drain with the read token", n.State)
				}
				// A reload keeps the token (sessionStorage) and asks for
				// nothing; "Forget token" removes it and asks again.
				b.run("reload", chromedp.Reload())
				b.waitFor("live after the reload", `document.getElementById('stream').dataset.state === 'live' && document.getElementById('login').hidden`)
				b.reloadBy("forget the token", chromedp.Click(chromedp.ID("logout")))
				b.waitFor("the form after forgetting the token", `!document.getElementById('login').hidden &&
					sessionStorage.getItem('gracewatch-token') === null`)
			}
			b.checkRequests(withToken)
			b.checkProblems()
		})
	}
}

// reloadBy runs an action that reloads the page and waits for the new
// page's load event.
func (b *browser) reloadBy(what string, action chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.tab, browserStep)
	defer cancel()
	loaded := chromedp.Events(ctx, page.LoadEventFired)
	if err := chromedp.Do(ctx, action); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	for _, err := range loaded {
		if err != nil {
			b.t.Fatalf("%s: waiting for the page to load: %v", what, err)
		}
		return
	}
}

// login checks that the page asks for a token, refuses a wrong one with a
// clear message, and takes tok.
func (b *browser) login(tok string) {
	b.t.Helper()
	const form = `!document.getElementById('login').hidden && document.getElementById('main').hidden &&
		document.getElementById('stream').dataset.state === 'error' && document.getElementById('login-why').textContent.includes(%q)`
	b.waitFor("the token form", fmt.Sprintf(form, "serves the nodes only with a token"))
	b.run("type a wrong token", chromedp.SendKeys(chromedp.ID("login-token"), "wrong-token-0123456789"), chromedp.Click(chromedp.ID("login-open")))
	b.waitFor("the wrong token refused", fmt.Sprintf(form, "refused the token"))
	b.run("type the token", chromedp.SendKeys(chromedp.ID("login-token"), tok), chromedp.Click(chromedp.ID("login-open")))
}

// checkRequests checks every request the page made: none has a token in
// its URL; with withToken, every data request carries the read token as a
// header and none is an admin request (but the test's own drain).
func (b *browser) checkRequests(withToken bool) {
	b.t.Helper()
	reqs := b.sent()
	var watches, configs int
	for _, r := range reqs {
		for _, tok := range []string{testToken, testReadToken, "wrong-token-0123456789", "token="} {
			if strings.Contains(r.URL, tok) {
				b.t.Errorf("%s %s: the URL holds %q", r.Method, r.URL, tok)
			}
		}
		path := strings.TrimPrefix(r.URL, "http://")
		if i := strings.IndexByte(path, '/'); i >= 0 {
			path = path[i:]
		}
		switch {
		case r.Method == "POST" && path == "/v1/nodes/cn01/drain":
			continue // the test's own, above
		case r.Method != "GET":
			b.t.Errorf("the page made %s %s", r.Method, r.URL)
		case path == "/v1/watch":
			watches++
		case path == "/v1/config":
			configs++
		}
		if withToken && (path == "/v1/watch" || path == "/v1/config") && r.Authorization != "" &&
			r.Authorization != "Bearer "+testReadToken && r.Authorization != "Bearer wrong-token-0123456789" {
			b.t.Errorf("%s %s: Authorization %q", r.Method, r.URL, r.Authorization)
		}
		if withToken && path == "/v1/watch" && r.Authorization != "Bearer "+testReadToken {
			b.t.Errorf("%s %s without the read token: Authorization %q", r.Method, r.URL, r.Authorization)
		}
		if path == "/healthz" || path == "/readyz" || path == "/" {
			if r.Authorization != "" {
				b.t.Errorf("%s %s: the token sent to a public route", r.Method, r.URL)
			}
		}
	}
	if watches < 2 || configs < 1 {
		b.t.Errorf("the page made %d watches and %d config requests (want 2 or more and 1 or more): %+v", watches, configs, reqs)
	}
}

// screenshot takes a full-page screenshot, checks that it is a sane PNG,
// and writes it under the test's temporary directory and, with
// -update-screenshot, to testdata/.
func (b *browser) screenshot() {
	b.t.Helper()
	// Settle: the countdowns tick once a second, the bar animates.
	b.run("settle", chromedp.Sleep(600*time.Millisecond))
	ctx, cancel := context.WithTimeout(b.tab, browserStep)
	defer cancel()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(buf))
	if err != nil {
		b.t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	if sz := img.Bounds().Size(); sz.X != 1280 || sz.Y < 600 || sz.Y > 4000 {
		b.t.Errorf("screenshot of %v, want 1280 wide and 600 to 4000 high", sz)
	}
	path := filepath.Join(b.t.TempDir(), screenshotFile)
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s (%d KiB)", path, len(buf)>>10)
	if *updateScreenshot {
		if err := os.WriteFile(filepath.Join("testdata", screenshotFile), buf, 0o644); err != nil {
			b.t.Fatal(err)
		}
	}
}

// shortTempDir is a temporary folder with a short path, removed after t.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gwcr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
