package aggregator

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/httpapi"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

func TestHTTPRegisterJob(t *testing.T) {
	h := newHarness(t)
	h.member("n1", upMeta(1, 1))
	h.member("n2", upMeta(1, 1))
	h.member("n3", upMeta(1, 1))
	base := h.serve(httpapi.ServerOptions{Token: []byte(testToken)})
	ackControls(h.mesh, func(node string, c *gwpb.Control) *gwpb.Meta { return upMeta(1, 2) }, "")

	e := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	r := call(t, "POST", base+"/v1/jobs", testToken, `{"job":"55","nodes":"n[1-3],n2","expiration":"`+e+`","grace":"90s"}`)
	var res api.JobResult
	if err := json.Unmarshal(r.body, &res); err != nil || r.status != 200 {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	if res.Registered != 3 || res.Failed != 0 || len(res.Nodes) != 3 || res.Nodes[0].Node != "n1" || res.Nodes[2].Node != "n3" {
		t.Fatalf("result %+v, want the 3 nodes (n2 once), in order", res)
	}
	sent := h.mesh.Sent()
	if len(sent) != 3 {
		t.Fatalf("sent %d controls, want one per node", len(sent))
	}
	for _, s := range sent {
		c := s.Env.GetControl()
		j := c.GetJob()
		if c.GetAction() != gwpb.Action_ACTION_REGISTER_JOB || j.GetJob() != "55" || j.GetExpiration() != e || j.GetGrace() != "90s" {
			t.Errorf("control to %s = %+v", s.Node, c)
		}
	}

	// Unknown nodes and refusals are in the answer, not an error.
	r = call(t, "POST", base+"/v1/jobs", testToken, `{"job":"56","nodes":"n1,ghost","expiration":"0"}`)
	if err := json.Unmarshal(r.body, &res); err != nil || r.status != 200 {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	if res.Registered != 1 || res.Failed != 1 || res.Nodes[1].OK || !strings.Contains(res.Nodes[1].Error, "unknown node") {
		t.Fatalf("result %+v, want ghost failed as unknown", res)
	}
	ackControls(h.mesh, nil, "job 57: job already registered")
	r = call(t, "POST", base+"/v1/jobs", testToken, `{"job":"57","nodes":"n1","expiration":"0"}`)
	if err := json.Unmarshal(r.body, &res); err != nil || res.Failed != 1 || !strings.Contains(res.Nodes[0].Error, "already registered") {
		t.Fatalf("refused: %s", r.body)
	}
}

func TestHTTPRegisterJobBadInput(t *testing.T) {
	h := newHarness(t)
	base := h.serve(httpapi.ServerOptions{Token: []byte(testToken)})
	for _, c := range []struct{ name, body, want string }{
		{"no job", `{"nodes":"n1","expiration":"0"}`, "job id is empty"},
		{"bad job", `{"job":"a/b","nodes":"n1","expiration":"0"}`, "contains '/'"},
		{"no nodes", `{"job":"1","expiration":"0"}`, "nodes: the job's nodes are required"},
		{"bad hostlist", `{"job":"1","nodes":"n[1-","expiration":"0"}`, "nodes: "},
		{"no expiration", `{"job":"1","nodes":"n1"}`, "an expiration is required"},
		{"bad expiration", `{"job":"1","nodes":"n1","expiration":"soon"}`, "not a time"},
		{"bad grace", `{"job":"1","nodes":"n1","expiration":"0","grace":"-1s"}`, "negative"},
		{"unknown field", `{"job":"1","nodes":"n1","expiration":"0","walltime":5}`, "unknown field"},
		{"trailing", `{"job":"1","nodes":"n1","expiration":"0"} x`, "trailing data"},
		{"empty", ``, "empty body"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := call(t, "POST", base+"/v1/jobs", testToken, c.body)
			if r.status != 400 || !strings.Contains(r.errorMsg(t), c.want) {
				t.Fatalf("%d %s, want 400 saying %q", r.status, r.body, c.want)
			}
		})
	}
	if r := call(t, "POST", base+"/v1/jobs", "", `{"job":"1","nodes":"n1","expiration":"0"}`); r.status != 401 {
		t.Fatalf("without a token: %d, want 401", r.status)
	}
	big := `{"job":"1","nodes":"` + strings.Repeat("n", httpapi.MaxJobBodyBytes) + `","expiration":"0"}`
	if r := call(t, "POST", base+"/v1/jobs", testToken, big); r.status != 413 {
		t.Fatalf("a body over %d bytes: %d, want 413", httpapi.MaxJobBodyBytes, r.status)
	}
	if len(h.mesh.Sent()) != 0 {
		t.Fatalf("bad requests sent controls: %+v", h.mesh.Sent())
	}
}
