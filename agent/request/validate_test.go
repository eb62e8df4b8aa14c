package request

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var testNow = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

func TestValidateJobID(t *testing.T) {
	tests := []struct {
		name, id string
		wantErr  string // substring; empty means valid
	}{
		{"flux f58 id", "ƒAbc123xyz", ""},
		{"slurm numeric", "1234", ""},
		{"dots inside", "1234.batch", ""},
		{"max length", strings.Repeat("a", 128), ""},
		{"empty", "", "empty"},
		{"too long", strings.Repeat("a", 129), "129 bytes, longer than 128"},
		{"slash", "a/b", "contains '/'"},
		{"space", "a b", "white space"},
		{"no-break space", "a\u00a0b", "white space"},
		{"tab", "a\tb", "control character"},
		{"newline", "a\nb", "control character"},
		{"nul", "a\x00b", "control character"},
		{"invalid utf-8", "a\xffb", "not valid UTF-8"},
		{"dot", ".", "not allowed"},
		{"dotdot", "..", "not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateJobID(tt.id)
			checkInputError(t, err, "job", tt.wantErr)
		})
	}
}

func TestValidateReason(t *testing.T) {
	tests := []struct {
		name, reason, wantErr string
	}{
		{"ok", "NFS server fixed, node rebooted", ""},
		{"max", strings.Repeat("x", 256), ""},
		{"empty", "", "required"},
		{"blank", "  ", "required"},
		{"too long", strings.Repeat("x", 257), "257 bytes"},
		{"newline", "a\nb", "control character"},
		{"invalid utf-8", "\xff", "UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkInputError(t, ValidateReason(tt.reason), "reason", tt.wantErr)
		})
	}
}

func TestValidateEpilog(t *testing.T) {
	tests := []struct {
		name           string
		req            EpilogRequest
		field, wantErr string
	}{
		{"ok", EpilogRequest{Argv: []string{"/bin/true"}, Env: []string{"A=1", "B="}, Dir: "/tmp"}, "", ""},
		{"no argv", EpilogRequest{}, "argv", "command is required"},
		{"empty command", EpilogRequest{Argv: []string{""}}, "argv", "command is required"},
		{"nul in arg", EpilogRequest{Argv: []string{"echo", "a\x00"}}, "argv", "argument 1 contains a NUL"},
		{"env without =", EpilogRequest{Argv: []string{"x"}, Env: []string{"A"}}, "env", "KEY=VALUE"},
		{"env empty key", EpilogRequest{Argv: []string{"x"}, Env: []string{"=1"}}, "env", "KEY=VALUE"},
		{"relative dir", EpilogRequest{Argv: []string{"x"}, Dir: "tmp"}, "dir", "not an absolute path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkInputError(t, ValidateEpilog(tt.req), tt.field, tt.wantErr)
		})
	}
}

func TestParseExpiration(t *testing.T) {
	e1300 := time.Date(2024, 5, 1, 13, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		in       string
		maxAge   time.Duration
		want     time.Time
		wantNone bool
		wantErr  []string // substrings
	}{
		{name: "rfc3339", in: "2024-05-01T13:00:00Z", want: e1300},
		{name: "rfc3339 offset", in: "2024-05-01T15:00:00+02:00", want: e1300},
		{name: "rfc3339 fraction", in: "2024-05-01T13:00:00.25Z", want: e1300.Add(250 * time.Millisecond)},
		{name: "unix seconds", in: "1714568400", want: e1300},
		{name: "unix fraction (flux)", in: "1714568400.5", want: e1300.Add(500 * time.Millisecond)},
		{name: "unix fraction beyond ns", in: "1714568400.1234567891", want: e1300.Add(123456789)},
		{name: "unix trailing dot", in: "1714568400.", want: e1300},
		{name: "surrounding space", in: " 1714568400 ", want: e1300},
		{name: "slightly past", in: "2024-05-01T00:00:00Z", want: time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)},
		{name: "zero", in: "0", wantNone: true},
		{name: "zero float", in: "0.0", wantNone: true},
		{name: "far past without maxAge", in: "1000000000", maxAge: -1, want: time.Unix(1000000000, 0)},
		{name: "empty", in: "", wantErr: []string{"required", "RFC 3339"}},
		{name: "garbage", in: "tomorrow", wantErr: []string{`not a time: "tomorrow"`, "RFC 3339", "Unix seconds", "0 for no expiration"}},
		{name: "date only", in: "2024-05-01", wantErr: []string{`not a time: "2024-05-01"`}},
		{name: "exponent", in: "1.7e9", wantErr: []string{`not a time: "1.7e9"`}},
		{name: "negative", in: "-5", wantErr: []string{`not a time: "-5"`}},
		{name: "two dots", in: "1.2.3", wantErr: []string{"not a time"}},
		{name: "huge", in: "99999999999999999999999", wantErr: []string{"out of range"}},
		{name: "long garbage is shortened", in: strings.Repeat("x", 500), wantErr: []string{"(500 bytes)"}},
		{name: "far past", in: "1000000000", wantErr: []string{"2001-09-09T01:46:40Z is 22y", "in the past (more than 24h0m0s)"}},
		{name: "past beyond maxAge", in: "2024-04-30T11:00:00Z", wantErr: []string{"2024-04-30T11:00:00Z is 25h0m0s in the past"}},
		{name: "milliseconds as seconds", in: "1714568400000", wantErr: []string{`"1714568400000" is out of range: Unix seconds up to`, "milliseconds given as seconds"}},
		// Beyond what parseUnix keeps (1<<40): the message printed the
		// clamped value's date, year 36812.
		{name: "far beyond", in: "9999999999999", wantErr: []string{`"9999999999999" is out of range: Unix seconds up to 2029924800 (2034-04-29T12:00:00Z, 10 years from now)`}},
		{name: "year 9999", in: "9999-01-01T00:00:00Z", wantErr: []string{"in the future"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			maxAge := tt.maxAge
			if maxAge == 0 {
				maxAge = 24 * time.Hour
			}
			e, none, err := ParseExpiration(tt.in, testNow, maxAge)
			if len(tt.wantErr) > 0 {
				var ie *InputError
				if !errors.As(err, &ie) || ie.Field != "expiration" {
					t.Fatalf("ParseExpiration(%q) = %v, %v, %v; want an InputError of field expiration", tt.in, e, none, err)
				}
				for _, s := range tt.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseExpiration(%q): %v", tt.in, err)
			}
			if none != tt.wantNone || !e.Equal(tt.want) {
				t.Errorf("ParseExpiration(%q) = %v, none=%v; want %v, none=%v", tt.in, e, none, tt.want, tt.wantNone)
			}
		})
	}
}

func TestParseGrace(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr string
	}{
		{"90s", 90 * time.Second, ""},
		{"90", 90 * time.Second, ""},
		{"2m30s", 150 * time.Second, ""},
		{"0", 0, ""},
		{"168h", 7 * 24 * time.Hour, ""},
		{"604800", 7 * 24 * time.Hour, ""},
		{"", 0, "empty"},
		{"-1", 0, "negative"},
		{"-5s", 0, "negative"},
		{"169h", 0, "longer than 168h0m0s"},
		{"604801", 0, "longer than"},
		{"99999999999999999999", 0, "not a duration"},
		{"1.5", 0, "not a duration"},
		{"soon", 0, `not a duration: "soon"`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			d, err := ParseGrace(tt.in)
			if tt.wantErr != "" {
				checkInputError(t, err, "grace", tt.wantErr)
				return
			}
			if err != nil || d != tt.want {
				t.Errorf("ParseGrace(%q) = %v, %v; want %v", tt.in, d, err, tt.want)
			}
		})
	}
}

func TestParseR(t *testing.T) {
	tests := []struct {
		file    string
		want    float64
		wantErr string
	}{
		{"valid.json", 1700000000.5, ""},
		{"no-expiration.json", 0, ""},
		{"zero-expiration.json", 0, ""},
		{"version2.json", 0, "R: version: got 2, only version 1"},
		{"no-version.json", 0, "R: version: missing"},
		{"scheduling-only.json", 0, "R: execution: missing"},
		{"no-rlite.json", 0, "R: execution.R_lite: missing"},
		{"negative-expiration.json", 0, "R: execution.expiration: -1 is negative"},
		{"string-expiration.json", 0, "R: execution.expiration: want a number, got string"},
		{"before-start.json", 0, "execution.expiration 1.699999999e+09 is not after execution.starttime"},
		{"truncated.json", 0, "R: invalid JSON at offset"},
		{"not-json.txt", 0, "R: invalid JSON at offset 1"},
		// Written by flux-core 0.88 and Fluxion 0.54 (flux job info ID R):
		// sched-simple's float times and 0.0 for no time limit, Fluxion's
		// integer times and 9223372036 for no time limit.
		{"flux-sched-simple-limit.json", 1796283773.0988119, ""},
		{"flux-sched-simple-no-limit.json", 0, ""},
		{"flux-fluxion-limit.json", 1796284043, ""},
		{"flux-fluxion-limit-2nodes.json", 1796284128, ""},
		{"flux-fluxion-no-limit.json", 0, ""},
		{"fluxion-no-limit-fraction.json", 0, ""},
		// A time past the sentinel is a time (the caller refuses it as too far ahead).
		{"past-fluxion-no-limit.json", 9223372037, ""},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "R", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			e, err := ParseR(data)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseR(%s) = %v, %v; want error containing %q", tt.file, e, err, tt.wantErr)
				}
				return
			}
			if err != nil || e != tt.want {
				t.Fatalf("ParseR(%s) = %v, %v; want %v", tt.file, e, err, tt.want)
			}
		})
	}
	if _, err := ParseR(nil); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("ParseR(nil) = %v; want an error saying it is empty", err)
	}
}

func TestFormatUnixRoundTrip(t *testing.T) {
	for _, v := range []float64{0, 1700000000, 1700000000.5, 1714568400.25} {
		s := FormatUnix(v)
		if strings.ContainsAny(s, "eE") {
			t.Errorf("FormatUnix(%v) = %q has an exponent", v, s)
		}
		e, none, err := ParseExpiration(s, time.Unix(int64(v), 0), 24*time.Hour)
		if err != nil {
			t.Fatalf("ParseExpiration(FormatUnix(%v)=%q): %v", v, s, err)
		}
		if v == 0 {
			if !none {
				t.Errorf("%q: want none", s)
			}
			continue
		}
		if got := float64(e.UnixNano()) / 1e9; math.Abs(got-v) > 1e-6 {
			t.Errorf("round trip of %v gave %v", v, got)
		}
	}
}

// checkInputError checks that err is nil (wantErr empty) or an *InputError of
// field whose message contains wantErr.
func checkInputError(t *testing.T, err error, field, wantErr string) {
	t.Helper()
	if wantErr == "" {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	var ie *InputError
	if !errors.As(err, &ie) {
		t.Fatalf("got %v (%T); want an *InputError", err, err)
	}
	if ie.Field != field {
		t.Errorf("field = %q; want %q (error %v)", ie.Field, field, err)
	}
	if !strings.Contains(ie.Msg, wantErr) {
		t.Errorf("message %q does not contain %q", ie.Msg, wantErr)
	}
}

func TestCheckRegistration(t *testing.T) {
	now := time.Now()
	exp := strconv.FormatInt(now.Add(time.Hour).Unix(), 10)
	if err := CheckRegistration("42", exp, "", now); err != nil {
		t.Fatalf("a good registration: %v", err)
	}
	if err := CheckRegistration("42", "0", "90s", now); err != nil {
		t.Fatalf("no expiration, a grace: %v", err)
	}
	for _, c := range []struct{ job, exp, grace, field string }{
		{"", exp, "", "job"},
		{"42", "tomorrow", "", "expiration"},
		{"42", exp, "-5s", "grace"},
	} {
		err := CheckRegistration(c.job, c.exp, c.grace, now)
		var ie *InputError
		if !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("CheckRegistration(%q, %q, %q) = %v, want an error on %s", c.job, c.exp, c.grace, err, c.field)
		}
	}
}
