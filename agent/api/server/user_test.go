package server

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/agent/request"
)

// TestUserPolicy: a registration's user reaches the Service when it is
// valid; a hostile one is dropped, never the registration: job start and an
// update that changes something else succeed without it and answer with a
// warning naming the field and what was wrong; an epilog runs without it;
// an update of nothing but a bad user is refused with field "user".
func TestUserPolicy(t *testing.T) {
	svc := &fakeService{Job: api.Job{ID: "42", Phase: api.PhaseRunning, Grace: "2m0s"}}
	ts := startServer(t, svc, ServerOptions{Logger: testLogger(t)}, "")
	ctx := context.Background()
	c := ts.client
	exp := time.Now().Add(time.Hour).Format(time.RFC3339)

	if j, err := c.StartJob(ctx, request.JobStartRequest{Job: "42", Expiration: exp, User: "alice"}); err != nil || len(j.Warnings) != 0 {
		t.Fatalf("StartJob(alice) = %+v, %v", j, err)
	}
	hostile := "x\n$(reboot)"
	j, err := c.StartJob(ctx, request.JobStartRequest{Job: "43", Expiration: exp, User: hostile})
	if err != nil {
		t.Fatalf("StartJob with a hostile user failed: %v", err)
	}
	if len(j.Warnings) != 1 || !strings.Contains(j.Warnings[0], "user: user name") || !strings.Contains(j.Warnings[0], "control byte 0x0a at byte 1") ||
		!strings.Contains(j.Warnings[0], "registered and supervised without a user name") {
		t.Errorf("warnings = %q", j.Warnings)
	}
	if _, err := c.UpdateJob(ctx, "43", request.JobUpdateRequest{Cgroup: "0::/x", User: strings.Repeat("u", 65)}); err != nil {
		t.Errorf("UpdateJob with a cgroup and a too long user failed: %v", err)
	}
	_, err = c.UpdateJob(ctx, "43", request.JobUpdateRequest{User: "a b"})
	var se *api.ServerError
	if !errors.As(err, &se) || se.Status != 400 || se.Body.Field != "user" || !strings.Contains(se.Body.Error, "a space at byte 1") {
		t.Errorf("UpdateJob(user only, bad) = %v; want an input error of field user", err)
	}
	if _, err := c.UpdateJob(ctx, "43", request.JobUpdateRequest{User: "bob"}); err != nil {
		t.Errorf("UpdateJob(bob): %v", err)
	}
	if st, err := c.Epilog(ctx, "44", request.EpilogRequest{Argv: []string{"true"}, User: "-rf"}, io.Discard, io.Discard); err != nil || st != 0 {
		t.Errorf("Epilog with a bad user = %d, %v", st, err)
	}
	var users []string
	for _, cl := range svc.Calls() {
		switch a := cl.Arg.(type) {
		case request.JobStartRequest:
			users = append(users, cl.Method+":"+a.User)
		case request.JobUpdateRequest:
			users = append(users, cl.Method+":"+a.User)
		case request.EpilogRequest:
			users = append(users, cl.Method+":"+a.User)
		}
	}
	want := "StartJob:alice StartJob: UpdateJob: UpdateJob:bob RunEpilog:"
	if got := strings.Join(users, " "); got != want {
		t.Errorf("users the Service got = %q; want %q", got, want)
	}
}
