package aggregator

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/httpapi"
	"github.com/gracewatch/gracewatch/aggregator/meshfake"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/hostinfo"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/internal/testutil/apispec"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

const testToken = "s3cret-token-0123456789"

// serve starts the real HTTP server over h's Service on 127.0.0.1:0 and
// returns its base URL.
func (h *harness) serve(o httpapi.ServerOptions) string {
	h.t.Helper()
	_, base := h.server(o)
	return base
}

// server is serve that returns the httpapi.Server too.
func (h *harness) server(o httpapi.ServerOptions) (*httpapi.Server, string) {
	h.t.Helper()
	if o.Clock == nil && h.clk != nil { // not a nil *clock.Fake in an interface
		o.Clock = h.clk
	}
	if o.Logger == nil {
		o.Logger = testLogger(h.t)
	}
	srv := httpapi.NewServer(edge{h.svc}, o)
	return srv, testutil.ServeLocal(h.t, srv, testTimeout)
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) errorMsg(t testing.TB) string {
	t.Helper()
	return apispec.Response{Status: r.status, Header: r.header, Body: r.body}.ErrorMsg(t)
}

// call makes a real request and validates the response against the spec
// (apispec.Call).
func call(t testing.TB, method, url, token, body string) response {
	t.Helper()
	r := apispec.Call(t, testTimeout, method, url, token, body)
	return response{r.Status, r.Header, r.Body}
}

// ackControls makes the fake mesh answer every Control like an agent: ok
// with the meta that meta returns, or refused with errMsg.
func ackControls(fm *meshfake.Mesh, meta func(node string, c *gwpb.Control) *gwpb.Meta, errMsg string) {
	fm.OnSend(func(node string, env *gwpb.Envelope) error {
		c := env.GetControl()
		ack := &gwpb.ControlAck{Id: c.GetId(), Ok: errMsg == "", Error: errMsg}
		if meta != nil {
			ack.Meta = meta(node, c)
		}
		fm.Deliver(node, &gwpb.Envelope{Body: &gwpb.Envelope_Ack{Ack: ack}})
		return nil
	})
}

func TestHTTPReadEndpoints(t *testing.T) {
	h := newHarness(t)
	h.member("node3", upMeta(1, 1))
	h.member("node17", teardownMeta(1, 2, at(time.Minute)))
	h.member("node18", downMeta(1, 3, "hung"))
	h.member("login1", upMeta(1, 1))
	h.update("node18", &gwpb.StateUpdate{Meta: downMeta(1, 3, "hung"), Reason: "hung, in full",
		Reports: []*gwpb.Report{{Job: "5", Summary: "1 unkillable", TakenMs: ms(t0), DetailJson: []byte(`{"job":"5","processes":[]}`)}}})
	base := h.serve(httpapi.ServerOptions{})

	r := call(t, "GET", base+"/v1/nodes", "", "")
	var list api.NodeList
	if err := json.Unmarshal(r.body, &list); err != nil || r.status != 200 {
		t.Fatalf("GET /v1/nodes: %d %s", r.status, r.body)
	}
	if len(list.Nodes) != 4 || list.Nodes[0].Name != "login1" {
		t.Errorf("nodes = %+v", list.Nodes)
	}
	for _, n := range list.Nodes {
		if n.LastReport != nil && n.LastReport.Detail != nil {
			t.Errorf("the list carries report detail of %s", n.Name)
		}
	}

	r = call(t, "GET", base+"/v1/nodes?state=down", "", "")
	if err := json.Unmarshal(r.body, &list); err != nil || len(list.Nodes) != 1 || list.Nodes[0].Name != "node18" {
		t.Errorf("?state=down: %s", r.body)
	}
	r = call(t, "GET", base+"/v1/nodes?format=hostlist", "", "")
	if string(r.body) != "login1,node[3,17-18]\n" || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
		t.Errorf("hostlist: %q (%s)", r.body, r.header.Get("Content-Type"))
	}
	r = call(t, "GET", base+"/v1/nodes?format=hostlist&state=unreachable", "", "")
	if string(r.body) != "\n" {
		t.Errorf("empty hostlist: %q", r.body)
	}
	for _, q := range []string{"?state=gone", "?format=xml", "?status=down"} {
		if r := call(t, "GET", base+"/v1/nodes"+q, "", ""); r.status != 400 {
			t.Errorf("%s: %d, want 400", q, r.status)
		} else {
			r.errorMsg(t)
		}
	}

	// Without a token, the report's summary only, and how to get the rest
	// (here: this aggregator has no token at all).
	r = call(t, "GET", base+"/v1/nodes/node18", "", "")
	var n api.Node
	if err := json.Unmarshal(r.body, &n); err != nil || n.Reason != "hung, in full" || n.LastReport == nil ||
		n.LastReport.Detail != nil || n.LastReport.Summary != "1 unkillable" || !strings.Contains(n.LastReport.DetailOmitted, "this aggregator has neither") {
		t.Errorf("GET /v1/nodes/node18 without a token: %s", r.body)
	}
	// With a token, read_token off: the detail to the token only
	// (TestTokenRules: the read token too).
	tokBase := h.serve(httpapi.ServerOptions{Token: []byte(testToken)})
	for _, tc := range []struct {
		token      string
		wantDetail bool
	}{{"", false}, {"wrong-token-0123456789", false}, {testToken, true}} {
		r := call(t, "GET", tokBase+"/v1/nodes/node18", tc.token, "")
		var n api.Node
		if err := json.Unmarshal(r.body, &n); err != nil || r.status != 200 || n.LastReport == nil ||
			(string(n.LastReport.Detail) == `{"job":"5","processes":[]}`) != tc.wantDetail ||
			strings.Contains(n.LastReport.DetailOmitted, "send Authorization: Bearer") == tc.wantDetail {
			t.Errorf("GET /v1/nodes/node18 with token %q: %d %s", tc.token, r.status, r.body)
		}
	}
	r = call(t, "GET", base+"/v1/nodes/node17", "", "")
	if err := json.Unmarshal(r.body, &n); err != nil || n.FreeAt == nil || !n.Schedulable {
		t.Errorf("GET /v1/nodes/node17: %s", r.body)
	}
	r = call(t, "GET", base+"/v1/nodes/nope", "", "")
	if r.status != 404 || !strings.Contains(r.errorMsg(t), `unknown node "nope"`) {
		t.Errorf("unknown node: %d %s", r.status, r.body)
	}

	r = call(t, "GET", base+"/v1/config", "", "")
	var cc api.ClusterConfig
	if err := json.Unmarshal(r.body, &cc); err != nil || cc.Grace != 120 || cc.ClockSkewAllowance != 5 || cc.Schema != gwpb.SchemaVersion || cc.Mode != "enforce" {
		t.Errorf("config: %s", r.body)
	}

	r = call(t, "GET", base+"/healthz", "", "")
	var hz api.Health
	if err := json.Unmarshal(r.body, &hz); err != nil || hz.Status != "ok" || hz.Leader != "agg-1" {
		t.Errorf("healthz: %s", r.body)
	}
	r = call(t, "GET", base+"/readyz", "", "")
	if r.status != 200 {
		t.Errorf("readyz: %d %s", r.status, r.body)
	}
	h.mesh.SetJoined(false)
	r = call(t, "GET", base+"/readyz", "", "")
	var rd api.Readiness
	if err := json.Unmarshal(r.body, &rd); err != nil || r.status != 503 || rd.Ready || !strings.Contains(rd.Detail, "not joined") {
		t.Errorf("readyz before join: %d %s", r.status, r.body)
	}

	// Errors of the router are JSON too (not in the spec: no such route).
	for _, c := range []struct{ method, path string }{{"POST", "/v1/nodes"}, {"GET", "/v2/nodes"}, {"DELETE", "/v1/nodes/node3"}} {
		req, _ := http.NewRequest(c.method, base+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var eb api.ErrorBody
		if json.Unmarshal(b, &eb) != nil || eb.Error == "" || (resp.StatusCode != 404 && resp.StatusCode != 405) {
			t.Errorf("%s %s: %d %s", c.method, c.path, resp.StatusCode, b)
		}
	}
}

func TestHTTPInsecureMeshInReadyz(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.MeshInsecure = true })
	base := h.serve(httpapi.ServerOptions{})
	r := call(t, "GET", base+"/readyz", "", "")
	var rd api.Readiness
	if err := json.Unmarshal(r.body, &rd); err != nil || !rd.Insecure || !strings.Contains(rd.Detail, "insecure") {
		t.Errorf("readyz: %s", r.body)
	}
}

// With Options.Host, /readyz carries the machine's facts, read through
// gopsutil from the real machine (the response is validated against the
// spec by call).
func TestHTTPReadyzHost(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, func(o *Options) { o.Host = hostinfo.NewReader(hostinfo.Options{StateDir: dir}).Read })
	base := h.serve(httpapi.ServerOptions{})
	r := call(t, "GET", base+"/readyz", "", "")
	var rd api.Readiness
	if err := json.Unmarshal(r.body, &rd); err != nil || rd.Host == nil {
		t.Fatalf("readyz: %s", r.body)
	}
	if hf := rd.Host; hf.MemTotalBytes == 0 || hf.UptimeSeconds == 0 || hf.StateDir != dir || hf.StateDirSizeBytes == 0 || len(hf.Errors) > 0 {
		t.Errorf("host facts %+v", hf)
	}
}

func TestHTTPResumeAndDrain(t *testing.T) {
	h := newHarness(t)
	h.member("n1", downMeta(1, 5, "job 7 teardown exceeded grace"))
	base := h.serve(httpapi.ServerOptions{Token: []byte(testToken)})
	ackControls(h.mesh, func(node string, c *gwpb.Control) *gwpb.Meta {
		if c.GetAction() == gwpb.Action_ACTION_RESUME {
			return upMeta(1, 6)
		}
		return downMeta(1, 7, "drained: "+c.GetReason())
	}, "")

	r := call(t, "POST", base+"/v1/nodes/n1/resume", testToken, `{"reason": "fixed the NFS server"}`)
	var n api.Node
	if err := json.Unmarshal(r.body, &n); err != nil || r.status != 200 || n.State != api.StateUp || n.Seq != 6 {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	sent := h.mesh.Sent()
	if len(sent) != 1 || sent[0].Node != "n1" {
		t.Fatalf("sent = %+v", sent)
	}
	c := sent[0].Env.GetControl()
	if c.GetAction() != gwpb.Action_ACTION_RESUME || c.GetReason() != "fixed the NFS server" || !strings.HasPrefix(c.GetBy(), "agg-1") || c.GetId() == "" {
		t.Errorf("control = %+v", c)
	}
	if c.GetAskedMs() != h.clk.Now().UnixMilli() || c.GetDeadlineMs()-c.GetAskedMs() != DefaultControlTimeout.Milliseconds() {
		t.Errorf("control asked %d, deadline %d: want now and now + the control timeout", c.GetAskedMs(), c.GetDeadlineMs())
	}
	h.wantState("n1", view.StateUp)

	r = call(t, "POST", base+"/v1/nodes/n1/drain", testToken, `{"reason": "maintenance"}`)
	if err := json.Unmarshal(r.body, &n); err != nil || r.status != 200 || n.State != api.StateDown || n.Reason != "drained: maintenance" {
		t.Fatalf("drain: %d %s", r.status, r.body)
	}
}

func TestHTTPActionErrors(t *testing.T) {
	h := newHarness(t)
	h.member("n1", downMeta(1, 5, "hung"))
	h.member("gone", upMeta(1, 1))
	h.status("gone", mesh.StatusDead)
	base := h.serve(httpapi.ServerOptions{Token: []byte(testToken)})
	resume := base + "/v1/nodes/n1/resume"
	body := `{"reason":"ok"}`

	tests := []struct {
		name, url, token, body string
		status                 int
		msg                    string
	}{
		{"no token", resume, "", body, 401, "missing bearer token"},
		{"wrong token", resume, "not-the-token-at-all", body, 401, "wrong bearer token"},
		{"token checked before the node", base + "/v1/nodes/nope/resume", "", body, 401, "missing bearer token"},
		{"unknown node", base + "/v1/nodes/nope/resume", testToken, body, 404, `unknown node "nope"`},
		{"unreachable node", base + "/v1/nodes/gone/drain", testToken, body, 409, "node unreachable"},
		{"empty body", resume, testToken, "", 400, "empty body"},
		{"not an object", resume, testToken, `"x"`, 400, "want a JSON object"},
		{"no reason", resume, testToken, `{}`, 400, "reason is required"},
		{"blank reason", resume, testToken, `{"reason":"  "}`, 400, "reason is required"},
		{"unknown field", resume, testToken, `{"reason":"x","force":true}`, 400, `unknown field "force"`},
		{"reason not a string", resume, testToken, `{"reason":5}`, 400, "reason: want a string"},
		{"trailing data", resume, testToken, `{"reason":"x"} {}`, 400, "trailing data"},
		{"control character", resume, testToken, `{"reason":"a\nb"}`, 400, "control character"},
		{"reason too long", resume, testToken, `{"reason":"` + strings.Repeat("x", 257) + `"}`, 400, "longer than 256"},
		{"body too large", resume, testToken, `{"reason":"` + strings.Repeat("x", 5000) + `"}`, 413, "larger than 4096"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := call(t, "POST", tt.url, tt.token, tt.body)
			if r.status != tt.status || !strings.Contains(r.errorMsg(t), tt.msg) {
				t.Errorf("%d %s, want %d with %q", r.status, r.body, tt.status, tt.msg)
			}
			if r.status == 401 && r.header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	if got := len(h.mesh.Sent()); got != 0 {
		t.Errorf("%d controls sent by refused requests", got)
	}

	t.Run("agent refuses", func(t *testing.T) {
		ackControls(h.mesh, nil, "not down")
		r := call(t, "POST", resume, testToken, body)
		if r.status != 409 || !strings.Contains(r.errorMsg(t), "agent on n1 refused: not down") {
			t.Errorf("%d %s", r.status, r.body)
		}
	})
	t.Run("mesh cannot deliver", func(t *testing.T) {
		h.mesh.OnSend(func(string, *gwpb.Envelope) error { return errors.New("connection refused") })
		r := call(t, "POST", resume, testToken, body)
		if r.status != 502 || !strings.Contains(r.errorMsg(t), "connection refused") {
			t.Errorf("%d %s", r.status, r.body)
		}
	})
	t.Run("no ack in time", func(t *testing.T) {
		sent := make(chan struct{}, 1)
		h.mesh.OnSend(func(string, *gwpb.Envelope) error { sent <- struct{}{}; return nil })
		got := make(chan response, 1)
		go func() { got <- call(t, "POST", resume, testToken, body) }()
		select {
		case <-sent:
		case <-time.After(testTimeout):
			t.Fatal("no control sent")
		}
		h.clk.Advance(DefaultControlTimeout)
		r := <-got
		if r.status != 504 || !strings.Contains(r.errorMsg(t), "no answer from the agent on n1 within 10s") {
			t.Errorf("%d %s", r.status, r.body)
		}
	})
	t.Run("late ack is ignored", func(t *testing.T) {
		h.mesh.Deliver("n1", &gwpb.Envelope{Body: &gwpb.Envelope_Ack{Ack: &gwpb.ControlAck{Id: "stale", Ok: true}}})
		h.sync()
	})
}

// TestTwoAggregatorsServeTheSameView feeds two Services the same inputs (in
// different orders) and compares their /v1/nodes bodies byte for byte.
func TestTwoAggregatorsServeTheSameView(t *testing.T) {
	a := newHarness(t, func(o *Options) { o.Name = "agg-a" })
	b := newHarness(t, func(o *Options) { o.Name = "agg-b" })
	deadline := at(2 * time.Minute)
	update := &gwpb.StateUpdate{Meta: downMeta(1, 5, "trunc…"), Reason: "the full reason",
		Teardowns: []*gwpb.Teardown{{Job: "7", Phase: "overdue", DeadlineMs: ms(deadline), GraceMs: 120000}},
		Reports:   []*gwpb.Report{{Job: "7", Summary: "hung", TakenMs: ms(deadline), DetailJson: []byte(`{}`)}}}

	feedA := func(h *harness) {
		h.member("n1", upMeta(1, 1))
		h.member("n2", teardownMeta(1, 2, deadline))
		h.member("n3", downMeta(1, 5, "trunc…"))
		h.update("n3", update)
		h.member("n4", upMeta(1, 1))
		h.status("n4", mesh.StatusDead)
		h.mesh.SetMember(mesh.Member{Name: "n5", Status: mesh.StatusAlive, MetaErr: errFake("bad wire data")})
		h.sync()
	}
	feedB := func(h *harness) {
		h.mesh.SetMember(mesh.Member{Name: "n5", Status: mesh.StatusAlive, MetaErr: errFake("bad wire data")})
		h.update("n3", update) // the direct update before the gossip
		h.member("n3", downMeta(1, 5, "trunc…"))
		h.member("n4", upMeta(1, 1))
		h.status("n4", mesh.StatusDead)
		h.member("n2", teardownMeta(1, 2, deadline))
		h.member("n1", upMeta(1, 1))
	}
	feedA(a)
	feedB(b)
	ua, ub := a.serve(httpapi.ServerOptions{}), b.serve(httpapi.ServerOptions{})
	compare := func(path string) {
		t.Helper()
		ra, rb := call(t, "GET", ua+path, "", ""), call(t, "GET", ub+path, "", "")
		if !bytes.Equal(ra.body, rb.body) {
			t.Errorf("%s differs:\n%s\n%s", path, ra.body, rb.body)
		}
	}
	compare("/v1/nodes")
	compare("/v1/nodes/n3")
	compare("/v1/nodes?format=hostlist")
	// After the central deadline, both serve n2 down the same way.
	a.advance(3 * time.Minute)
	b.advance(3 * time.Minute)
	compare("/v1/nodes")
	if n := a.node("n2"); n.State != view.StateDown {
		t.Errorf("n2 = %s", n.State)
	}
}

func TestHTTPRareErrors(t *testing.T) {
	// A node name a hostlist cannot carry never enters the view (it was
	// a 500 when it did): the hostlist answers with the valid ones.
	h := newHarness(t)
	h.member("bad name", upMeta(1, 1))
	h.member("", upMeta(1, 1))
	h.member("n1", upMeta(1, 1))
	base := h.serve(httpapi.ServerOptions{Token: []byte(testToken)})
	r := call(t, "GET", base+"/v1/nodes?format=hostlist", "", "")
	if r.status != 200 || string(r.body) != "n1\n" {
		t.Errorf("hostlist with bad names sent: %d %q, want 200 n1", r.status, r.body)
	}

	// A Service that stopped: 503 for actions, and not ready.
	sh, stop := startHarness(t, h.clk, Options{Name: "agg-1", Clock: h.clk})
	sh.member("n1", downMeta(1, 1, "hung"))
	stop()
	stopped := sh.serve(httpapi.ServerOptions{Token: []byte(testToken)})
	r = call(t, "POST", stopped+"/v1/nodes/n1/resume", testToken, `{"reason":"x"}`)
	if r.status != 503 || !strings.Contains(r.errorMsg(t), "not running") {
		t.Errorf("resume on a stopped aggregator: %d %s", r.status, r.body)
	}
	if r := call(t, "GET", stopped+"/readyz", "", ""); r.status != 503 {
		t.Errorf("readyz of a stopped aggregator: %d", r.status)
	}
}
