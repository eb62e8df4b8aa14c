package request

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

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
