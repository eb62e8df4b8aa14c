package api

import (
	"bytes"
	"errors"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzDecodeJobStart feeds arbitrary bodies to the server's decoding and
// checks of POST /v1/jobs: it never panics, an error maps to 400 (naming a
// field) or 413 with a message, and an accepted request passes the
// validation helpers.
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
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		body := http.MaxBytesReader(nil, io.NopCloser(bytes.NewReader(data)), MaxBodyBytes)
		req, err := decodeJobStart(body, testNow)
		if err != nil {
			status, eb := errorResponse(err)
			if status != 400 && status != 413 {
				t.Fatalf("decode error %v maps to %d", err, status)
			}
			if eb.Error == "" || (status == 400 && eb.Field == "") {
				t.Fatalf("error body %+v says nothing", eb)
			}
			return
		}
		if err := ValidateJobID(req.Job); err != nil {
			t.Fatalf("accepted job id %q: %v", req.Job, err)
		}
		if _, _, err := ParseExpiration(req.Expiration, testNow, 0); err != nil {
			t.Fatalf("accepted expiration %q: %v", req.Expiration, err)
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
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		body := http.MaxBytesReader(nil, io.NopCloser(bytes.NewReader(data)), MaxBodyBytes)
		req, err := decodeJobUpdate(body, testNow)
		if err != nil {
			status, eb := errorResponse(err)
			if status != 400 && status != 413 {
				t.Fatalf("decode error %v maps to %d", err, status)
			}
			if eb.Error == "" || (status == 400 && eb.Field == "") {
				t.Fatalf("error body %+v says nothing", eb)
			}
			return
		}
		if req.Expiration == "" && req.Cgroup == "" {
			t.Fatal("accepted an update of nothing")
		}
		if req.Expiration != "" {
			if _, _, err := ParseExpiration(req.Expiration, testNow, 0); err != nil {
				t.Fatalf("accepted expiration %q: %v", req.Expiration, err)
			}
		}
		if err := ValidateCgroup(req.Cgroup); err != nil {
			t.Fatalf("accepted cgroup %q: %v", req.Cgroup, err)
		}
	})
}

// FuzzParseR: never panics; an accepted R has a finite, non-negative
// expiration; an error says it is about R.
func FuzzParseR(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "R", "*"))
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := ParseR(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "resource set R") {
				t.Fatalf("error %q does not say it is about R", err)
			}
			return
		}
		if e < 0 || math.IsNaN(e) || math.IsInf(e, 0) {
			t.Fatalf("accepted expiration %v", e)
		}
		if strings.ContainsAny(FormatUnix(e), "eE") {
			t.Fatalf("FormatUnix(%v) has an exponent", e)
		}
	})
}

// FuzzParseExpiration: never panics; errors are InputErrors of field
// expiration; accepted times lie within the allowed window.
func FuzzParseExpiration(f *testing.F) {
	for _, s := range []string{"0", "0.0", "1714568400", "1714568400.5", "2024-05-01T13:00:00Z",
		"2024-05-01T13:00:00.123456789+02:00", "1000000000", "1714568400000", "", "-1", "1.2.3", "9999999999999999999999"} {
		f.Add(s)
	}
	const maxAge = 24 * time.Hour
	f.Fuzz(func(t *testing.T, s string) {
		e, none, err := ParseExpiration(s, testNow, maxAge)
		if err != nil {
			var ie *InputError
			if !errors.As(err, &ie) || ie.Field != "expiration" || ie.Msg == "" {
				t.Fatalf("error %#v is not an InputError of expiration", err)
			}
			return
		}
		if none {
			if !e.IsZero() {
				t.Fatalf("none with time %v", e)
			}
			return
		}
		if testNow.Sub(e) > maxAge || e.Sub(testNow) > MaxExpirationAhead {
			t.Fatalf("%q accepted as %v, outside the window", s, e)
		}
	})
}

// FuzzFrames: the client's frame decoder never panics on what a broken or
// hostile server sends, and only returns an exit status in 0..255.
func FuzzFrames(f *testing.F) {
	for _, s := range []string{
		`{"stream":"stdout","data":"aGk="}` + "\n" + `{"stream":"exit","status":7}` + "\n",
		`{"stream":"stderr","data":"aGk="}` + "\n" + `{"stream":"error","error":"x"}` + "\n",
		`{"stream":"exit","status":-1}` + "\n",
		`{"stream":"exit"`,
		"\n\n",
		`{"stream":"stdout","data":5}` + "\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var out bytes.Buffer
		status, err := readFrames(bytes.NewReader(data), &out, &out)
		if err == nil && (status < 0 || status > 255) {
			t.Fatalf("status %d accepted", status)
		}
		if err != nil && err.Error() == "" {
			t.Fatal("empty error")
		}
	})
}
