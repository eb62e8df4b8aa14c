package cli

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gracewatch/gracewatch/aggregator/api"
)

// `aggregator serve` serves its own registry on the HTTP listener: the
// Service's and the server's metrics, build_info, and the Go and process
// collectors.
func TestServeMetrics(t *testing.T) {
	agent := startAgent(t, "node1")
	dir := t.TempDir()
	cfg := loopbackConfig(t, dir, "agg-metrics", agent.m.Load().Addr(), "", "")
	srv := startServe(t, cfg)
	waitFor(t, "node1 in the view", func() bool {
		var list api.NodeList
		return getJSON(srv.url+"/v1/nodes", &list) == 200 && len(list.Nodes) == 1
	})
	var body string
	waitFor(t, "node1 counted", func() bool {
		resp, err := http.Get(srv.url + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == 200 && strings.Contains(body, `gracewatch_aggregator_nodes{state="down"} 1`+"\n")
	})
	for _, want := range []string{
		`gracewatch_build_info{goversion="go`,
		`program="aggregator"`,
		`gracewatch_aggregator_mesh_members{status="alive"} 2`,
		`gracewatch_aggregator_mesh_joined 1`,
		`gracewatch_aggregator_http_requests_total{code="200",method="GET",route="/v1/nodes"}`,
		"go_goroutines ",
		"process_resident_memory_bytes ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if code := srv.stop(t); code != 0 {
		t.Errorf("exit %d", code)
	}
}
