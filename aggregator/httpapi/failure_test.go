package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gracewatch/gracewatch/aggregator/api"
)

// failedWith is how the server answers a request that failed with err: its
// status, and a part of its error's message.
type failedWith struct {
	err      error
	code     int
	contains string
}

// TestActionFailures: a node action (resume, drain, forget) that fails is
// answered with the status of its error's Failure, its text kept; a
// failure without one is a 500.
func TestActionFailures(t *testing.T) {
	h := newHarness(t)
	h.member("n1")
	base := h.serve(ServerOptions{Token: []byte(testToken)})
	cause := errors.New("the cause")
	for _, c := range []failedWith{
		{&Error{Failure: NotFound, Err: cause}, http.StatusNotFound, `unknown node "n1"`},
		{&Error{Failure: Conflict, Err: cause}, http.StatusConflict, "the cause"},
		{&Error{Failure: Timeout, Err: cause}, http.StatusGatewayTimeout, "the cause; the agent may still act on it"},
		{&Error{Failure: Unsent, Err: cause}, http.StatusBadGateway, "the cause"},
		{&Error{Failure: Unavailable, Err: cause}, http.StatusServiceUnavailable, "the cause"},
		{fmt.Errorf("wrapped: %w", &Error{Failure: Conflict, Err: cause}), http.StatusConflict, "wrapped: the cause"},
		{cause, http.StatusInternalServerError, "the cause"},
	} {
		h.svc.mu.Lock()
		h.svc.actErr = c.err
		h.svc.mu.Unlock()
		for _, action := range []string{"resume", "drain", "forget"} {
			code, msg := postAdmin(t, base+"/v1/nodes/n1/"+action, `{"reason":"test"}`)
			if code != c.code || !strings.Contains(msg, c.contains) {
				t.Errorf("%s failing with %v: %d %q, want %d with %q", action, c.err, code, msg, c.code, c.contains)
			}
		}
	}
}

// TestConfirmFailures: a confirmation of an incident that fails is
// answered 404 for NotFound, 409 for Conflict, 500 for any other error.
func TestConfirmFailures(t *testing.T) {
	h := newHarness(t)
	base := h.serve(ServerOptions{Token: []byte(testToken)})
	cause := errors.New("the cause")
	for _, c := range []failedWith{
		{&Error{Failure: NotFound, Err: cause}, http.StatusNotFound, "unknown incident 7"},
		{&Error{Failure: Conflict, Err: cause}, http.StatusConflict, "the cause"},
		{&Error{Failure: Timeout, Err: cause}, http.StatusInternalServerError, "the cause"},
		{cause, http.StatusInternalServerError, "the cause"},
	} {
		h.svc.mu.Lock()
		h.svc.confirmErr = c.err
		h.svc.mu.Unlock()
		code, msg := postAdmin(t, base+"/v1/incidents/7/confirm", `{"reason":"test"}`)
		if code != c.code || !strings.Contains(msg, c.contains) {
			t.Errorf("confirm failing with %v: %d %q, want %d with %q", c.err, code, msg, c.code, c.contains)
		}
	}
}

// postAdmin posts body to url with the admin token and returns the status
// and the error body's message.
func postAdmin(t *testing.T, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := (&http.Client{Timeout: testTimeout}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	var eb api.ErrorBody
	if err := json.Unmarshal(b, &eb); err != nil {
		t.Fatalf("POST %s: %d, not an error body: %s", url, resp.StatusCode, b)
	}
	return resp.StatusCode, eb.Error
}
