package aggregator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gracewatch/gracewatch/aggregator/httpapi"
	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// The status page in a real browser shows an observing node's would-be
// drain in its own panel: the node, its jobs, the diagnosis and the hung
// mount, and when it would have been drained; the readiness pill says
// that the cluster is mixed.
func TestStatusPageWouldDrain(t *testing.T) {
	b := newBrowser(t)
	now := time.Now().UTC().Truncate(time.Second)
	h := newHarnessClock(t, clock.NewFake(now))
	d := now.Add(-2 * time.Minute)
	h.member("cn01", teardownMeta(1, 2, d))
	u := observedUpdate(3, d)
	u.Reports[0].TakenMs = ms(d)
	h.update("cn01", u)
	h.member("cn02", upMeta(1, 1))
	h.update("cn02", &gwpb.StateUpdate{Meta: upMeta(1, 1), Mode: gwpb.Mode_MODE_ENFORCE})
	srv := serveRestartable(t, h.svc, httpapi.ServerOptions{Logger: testLogger(t), Clock: h.clk})

	b.run("open the page", chromedp.Navigate(srv.base()+"/"))
	b.waitFor("the would-be drain", `!document.getElementById('wouldDrain').hidden &&
		document.getElementById('c-wouldDrain').textContent === '1'`)
	ctx, cancel := context.WithTimeout(b.tab, browserStep)
	defer cancel()
	row, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#wouldDrain-list tbody tr').textContent`))
	if err != nil {
		t.Fatalf("reading the row: %v", err)
	}
	for _, want := range []string{"cn01", "job 7", "job 7 teardown exceeded grace 1m0s: 1 still running", "lustre on /scratch", "2 min ago",
		d.Format("15:04:05")} {
		if !strings.Contains(row, want) {
			t.Errorf("the would-drain row %q does not say %q", row, want)
		}
	}
	b.waitFor("the mixed modes in the readiness pill", `document.getElementById('ready').textContent.endsWith(', mixed modes')`)
	b.checkProblems()
}
