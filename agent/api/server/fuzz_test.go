package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/agent/request"
)

// FuzzDecodeJobStart feeds arbitrary bodies to the server's decoding and
// checks of POST /v1/jobs: it never panics, an error maps to 400 (naming a
// field) or 413 with a message, and an accepted request passes the
// validation helpers; its user is valid or empty, and a user dropped for
// being bad (request.CheckUser) comes with a warning naming the field.
func FuzzDecodeJobStart(f *testing.F) {
	for _, s := range []string{
		`{"job":"42","expiration":"1714568400"}`,
		`{"job":"42","expiration":"2024-05-01T13:00:00Z","grace":"90s","cgroup":"/sys/fs/cgroup/x"}`,
		`{"job":"42","expiration":"0","grace":"90"}`,
		`{"job":"42","expiration":"0"} x`,
		`{"job":"42","unknown":1}`,
		`{"job":42}`,
		`[]`,
		`null`,
		``,
		`{"job":"a\u0000b","expiration":"0"}`,
		`{"job":"42","expiration":"0","user":"alice"}`,
		`{"job":"42","expiration":"0","user":"svc$"}`,
		`{"job":"42","expiration":"0","user":"a;rm -rf /"}`,
		`{"job":"42","expiration":"0","user":"-x"}`,
		`{"job":"42","expiration":"0","user":"\u00e9t\u00e9"}`,
		`{"job":"42","expiration":"0","user":7}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		body := fuzzBody(data)
		var raw struct {
			User *string `json:"user"`
		}
		_ = json.Unmarshal(data, &raw)
		req, warn, err := decodeJobStart(body, testNow)
		if err != nil {
			checkRejection(t, err)
			return
		}
		if err := request.ValidateJobID(req.Job); err != nil {
			t.Fatalf("accepted job id %q: %v", req.Job, err)
		}
		if _, _, err := request.ParseExpiration(req.Expiration, testNow, 0); err != nil {
			t.Fatalf("accepted expiration %q: %v", req.Expiration, err)
		}
		if err := request.ValidateUser(req.User); err != nil {
			t.Fatalf("accepted user %q: %v", req.User, err)
		}
		if len(req.User) > request.MaxUserBytes {
			t.Fatalf("accepted user of %d bytes", len(req.User))
		}
		if warn != nil {
			var ie *request.InputError
			if req.User != "" || !errors.As(warn, &ie) || ie.Field != "user" || ie.Msg == "" {
				t.Fatalf("dropped user: req.User %q, warning %v", req.User, warn)
			}
		}
		if raw.User != nil && *raw.User != "" && req.User == "" && warn == nil {
			t.Fatalf("user %q dropped without a warning", *raw.User)
		}
	})
}

// FuzzDecodeJobUpdate feeds arbitrary bodies to the decoding and checks of
// POST /v1/jobs/{id}/update: it never panics, an error maps to 400 (naming
// a field) or 413, and an accepted request has a field to change, each well
// formed.
func FuzzDecodeJobUpdate(f *testing.F) {
	for _, s := range []string{
		`{"expiration":"1714568400"}`,
		`{"expiration":"2024-05-01T13:00:00Z","cgroup":"freezer:/slurm/uid_0/job_5"}`,
		`{"cgroup":"0::/system.slice/x"}`,
		`{"expiration":"0"}`,
		`{}`,
		`{"expiration":""}`,
		`{"expiration":"soon"}`,
		`{"cgroup":"a\nb"}`,
		`{"job":"5"}`,
		`null`,
		`{"user":"bob"}`,
		`{"user":"b b"}`,
		`{"cgroup":"0::/x","user":"b\nb"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		body := fuzzBody(data)
		req, warn, err := decodeJobUpdate(body, testNow)
		if err != nil {
			checkRejection(t, err)
			return
		}
		if req.Expiration == "" && req.Cgroup == "" && req.User == "" {
			t.Fatal("accepted an update of nothing")
		}
		if err := request.ValidateUser(req.User); err != nil {
			t.Fatalf("accepted user %q: %v", req.User, err)
		}
		if warn != nil && req.User != "" {
			t.Fatalf("warning %v but user %q kept", warn, req.User)
		}
		if req.Expiration != "" {
			if _, _, err := request.ParseExpiration(req.Expiration, testNow, 0); err != nil {
				t.Fatalf("accepted expiration %q: %v", req.Expiration, err)
			}
		}
		if err := request.ValidateCgroup(req.Cgroup); err != nil {
			t.Fatalf("accepted cgroup %q: %v", req.Cgroup, err)
		}
	})
}

// fuzzBody is data as a request body, bounded as the server bounds one.
func fuzzBody(data []byte) io.ReadCloser {
	return http.MaxBytesReader(nil, io.NopCloser(bytes.NewReader(data)), api.MaxBodyBytes)
}

// checkRejection fails t unless the decoding error err maps to 400 (with a
// field named) or 413, with an error body that says what was wrong.
func checkRejection(t *testing.T, err error) {
	t.Helper()
	status, eb := errorResponse(err)
	if status != 400 && status != 413 {
		t.Fatalf("decode error %v maps to %d", err, status)
	}
	if eb.Error == "" || (status == 400 && eb.Field == "") {
		t.Fatalf("error body %+v says nothing", eb)
	}
}
