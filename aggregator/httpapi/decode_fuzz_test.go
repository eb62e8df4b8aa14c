package httpapi

import (
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/internal/hostlist"
)

// fuzzDecoder fuzzes a request body's decoder from seeds: whatever the
// body, decode never panics and its error has a message; what it accepts
// passes check, which fails t on what no accepted request may hold.
func fuzzDecoder[R any](f *testing.F, seeds []string, decode func(body string) (R, error), check func(t *testing.T, req R)) {
	f.Helper()
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decode(string(body))
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		check(t, req)
	})
}

func FuzzDecodeAction(f *testing.F) {
	seeds := []string{`{"reason":"fixed"}`, `{}`, `{"reason":5}`, `{"reason":"x","y":1}`, `[]`, `{"reason":"a"} x`, "", `{"reason":"\u0000"}`}
	fuzzDecoder(f, seeds, func(body string) (api.ActionRequest, error) {
		return decodeAction(strings.NewReader(body))
	}, func(t *testing.T, req api.ActionRequest) {
		// Whatever is accepted is a usable reason.
		if strings.TrimSpace(req.Reason) == "" || len(req.Reason) > MaxReasonBytes || !utf8.ValidString(req.Reason) {
			t.Fatalf("accepted reason %q", req.Reason)
		}
		if validateReason(req.Reason) != nil {
			t.Fatalf("accepted an invalid reason %q", req.Reason)
		}
	})
}

// FuzzDecodeConfirm feeds arbitrary bodies to the decoder of POST
// /v1/incidents/{id}/confirm: whatever it accepts has a usable reason and a
// for within 0 to MaxConfirmFor, and so a duration within them.
func FuzzDecodeConfirm(f *testing.F) {
	seeds := []string{`{"reason":"fixed"}`, `{"reason":"x","for":600}`, `{"reason":"x","for":86400}`, `{"reason":"x","for":86400.0001}`,
		`{"reason":"x","for":-0}`, `{"reason":"x","for":-1}`, `{"reason":"x","for":1e308}`, `{"reason":"x","for":"1h"}`, `{"reason":"x","for":null}`,
		`{"reason":"x","for":1,"for":2}`, `{"reason":"x","until":1}`, `{}`, ""}
	fuzzDecoder(f, seeds, func(body string) (IncidentConfirmRequest, error) {
		return decodeConfirm(strings.NewReader(body))
	}, func(t *testing.T, req IncidentConfirmRequest) {
		if validateReason(req.Reason) != nil {
			t.Fatalf("accepted an invalid reason %q", req.Reason)
		}
		if d := confirmFor(req); math.IsNaN(req.For) || req.For < 0 || req.For > api.MaxConfirmFor.Seconds() || d < 0 || d > api.MaxConfirmFor {
			t.Fatalf("accepted for %v (%v)", req.For, d)
		}
	})
}

// decodedJob is what decodeJob accepts: the request and its nodes.
type decodedJob struct {
	req   api.JobRequest
	nodes []string
}

func FuzzDecodeJob(f *testing.F) {
	seeds := []string{`{"job":"5","nodes":"n[1-2]","expiration":"0"}`, `{"job":"5","nodes":"n1","expiration":"1714568400","grace":"90s"}`,
		`{}`, `{"job":5}`, `{"job":"5","nodes":"n[","expiration":"0"}`, `[]`, ``, `{"job":"5","nodes":"a,,b","expiration":"0"}`}
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	fuzzDecoder(f, seeds, func(body string) (decodedJob, error) {
		req, nodes, err := decodeJob(http.MaxBytesReader(nil, io.NopCloser(strings.NewReader(body)), MaxJobBodyBytes), now)
		return decodedJob{req, nodes}, err
	}, func(t *testing.T, d decodedJob) {
		req, nodes := d.req, d.nodes
		if req.Job == "" || len(nodes) == 0 || len(nodes) > hostlist.MaxExpand {
			t.Fatalf("accepted %+v with %d nodes", req, len(nodes))
		}
		seen := map[string]bool{}
		for _, n := range nodes {
			if n == "" || seen[n] {
				t.Fatalf("nodes %q: empty or repeated name", nodes)
			}
			seen[n] = true
		}
	})
}
