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

func FuzzDecodeAction(f *testing.F) {
	for _, s := range []string{`{"reason":"fixed"}`, `{}`, `{"reason":5}`, `{"reason":"x","y":1}`, `[]`, `{"reason":"a"} x`, "", `{"reason":"\u0000"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeAction(strings.NewReader(string(body)))
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
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
	for _, s := range []string{`{"reason":"fixed"}`, `{"reason":"x","for":600}`, `{"reason":"x","for":86400}`, `{"reason":"x","for":86400.0001}`,
		`{"reason":"x","for":-0}`, `{"reason":"x","for":-1}`, `{"reason":"x","for":1e308}`, `{"reason":"x","for":"1h"}`, `{"reason":"x","for":null}`,
		`{"reason":"x","for":1,"for":2}`, `{"reason":"x","until":1}`, `{}`, ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeConfirm(strings.NewReader(string(body)))
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if validateReason(req.Reason) != nil {
			t.Fatalf("accepted an invalid reason %q", req.Reason)
		}
		if d := confirmFor(req); math.IsNaN(req.For) || req.For < 0 || req.For > api.MaxConfirmFor.Seconds() || d < 0 || d > api.MaxConfirmFor {
			t.Fatalf("accepted for %v (%v)", req.For, d)
		}
	})
}

func FuzzDecodeJob(f *testing.F) {
	for _, s := range []string{`{"job":"5","nodes":"n[1-2]","expiration":"0"}`, `{"job":"5","nodes":"n1","expiration":"1714568400","grace":"90s"}`,
		`{}`, `{"job":5}`, `{"job":"5","nodes":"n[","expiration":"0"}`, `[]`, ``, `{"job":"5","nodes":"a,,b","expiration":"0"}`} {
		f.Add([]byte(s))
	}
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte) {
		req, nodes, err := decodeJob(http.MaxBytesReader(nil, io.NopCloser(strings.NewReader(string(body))), MaxJobBodyBytes), now)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
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
