package aggregator

import (
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/gracewatch/gracewatch/aggregator/httpapi"
	"github.com/gracewatch/gracewatch/aggregator/incident"
)

// The status page shows the open incidents (cause, hostlist, held drains)
// and the drain limit, from GET /v1/incidents.
func TestStatusPageIncidents(t *testing.T) {
	f := newIncFixture(t, 30, incident.Config{LimitFraction: 0.1})
	url := f.serve(httpapi.ServerOptions{})
	f.hangTwoMounts()
	b := newBrowser(t)
	b.run("open the page", chromedp.Navigate(url+"/"))
	b.waitFor("the incidents panel", `!document.getElementById('incidents').hidden && document.querySelectorAll('#incidents-list tbody tr').length === 2`)
	for _, want := range []string{"fuse.hangfs gracewatch-hangfs on /mnt/a", "n[1-20]", "n[21-22]", "3 of 30 nodes within 10 min, 3 used, 19 held"} {
		b.waitFor("the incidents panel to say "+want, fmt.Sprintf("document.getElementById('incidents').innerText.includes(%q)", want))
	}
}
