package request

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gracewatch/gracewatch/internal/jsonbody"
)

// Limits of the request fields.
const (
	// MaxJobIDBytes is the longest job id accepted.
	MaxJobIDBytes = 128
	// MaxReasonBytes is the longest resume reason accepted.
	MaxReasonBytes = 256
	// MaxGrace is the longest grace period a job may ask for.
	MaxGrace = 7 * 24 * time.Hour
	// MaxExpirationAhead is how far in the future an expiration may lie. It
	// catches milliseconds given as seconds (1700000000000 is year 55840).
	MaxExpirationAhead = 10 * 365 * 24 * time.Hour
)

// Invalid returns an *InputError for field.
func Invalid(field, format string, a ...any) *InputError {
	return &InputError{Field: field, Msg: fmt.Sprintf(format, a...)}
}

// Quote quotes s for an error message, shortened so that a huge or hostile
// input cannot blow up a log line.
func Quote(s string) string {
	const max = 64
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return strconv.Quote(s[:cut]) + fmt.Sprintf("... (%d bytes)", len(s))
	}
	return strconv.Quote(s)
}

// ValidateJobID checks an exec system's job id: 1 to 128 bytes of valid
// UTF-8 without '/', control characters or white space, and not "." or ".."
// (the id becomes a path segment of the API and of the job's cgroup name).
// It returns an *InputError with Field "job".
func ValidateJobID(id string) error {
	switch {
	case id == "":
		return Invalid("job", "job id is empty")
	case len(id) > MaxJobIDBytes:
		return Invalid("job", "job id %s is %d bytes, longer than %d", Quote(id), len(id), MaxJobIDBytes)
	case !utf8.ValidString(id):
		return Invalid("job", "job id %s is not valid UTF-8", Quote(id))
	case id == "." || id == "..":
		return Invalid("job", "job id %s is not allowed", Quote(id))
	}
	for _, r := range id {
		switch {
		case r == '/':
			return Invalid("job", "job id %s contains '/'", Quote(id))
		case unicode.IsControl(r):
			return Invalid("job", "job id %s contains a control character", Quote(id))
		case unicode.IsSpace(r):
			return Invalid("job", "job id %s contains white space", Quote(id))
		}
	}
	return nil
}

// ValidateReason checks the reason of a resume: 1 to 256 bytes of valid
// UTF-8 without control characters (it ends up in log lines and in the
// node's reason). It returns an *InputError with Field "reason".
func ValidateReason(reason string) error {
	switch {
	case strings.TrimSpace(reason) == "":
		return Invalid("reason", "a reason is required")
	case len(reason) > MaxReasonBytes:
		return Invalid("reason", "reason is %d bytes, longer than %d", len(reason), MaxReasonBytes)
	case !utf8.ValidString(reason):
		return Invalid("reason", "reason is not valid UTF-8")
	}
	for _, r := range reason {
		if unicode.IsControl(r) {
			return Invalid("reason", "reason contains a control character")
		}
	}
	return nil
}

// MaxCgroupBytes is the longest cgroup path accepted (PATH_MAX).
const MaxCgroupBytes = 4096

// ValidateCgroup checks the form of a cgroup given on the API (empty is
// none): at most MaxCgroupBytes of valid UTF-8 without NUL or newline. What
// it names, and whether the agent may observe it, is the Service's check.
// It returns an *InputError with Field "cgroup".
func ValidateCgroup(cg string) error {
	switch {
	case len(cg) > MaxCgroupBytes:
		return Invalid("cgroup", "cgroup %s is %d bytes, longer than %d", Quote(cg), len(cg), MaxCgroupBytes)
	case strings.IndexByte(cg, 0) >= 0:
		return Invalid("cgroup", "cgroup path contains a NUL byte")
	case strings.ContainsAny(cg, "\n\r"):
		return Invalid("cgroup", "cgroup path contains a newline")
	case !utf8.ValidString(cg):
		return Invalid("cgroup", "cgroup path is not valid UTF-8")
	}
	return nil
}

// ValidateEpilog checks an epilog request: a non-empty argv without NUL
// bytes, "K=V" environment entries, and an absolute working directory if
// any. It returns an *InputError with Field "argv", "env" or "dir".
func ValidateEpilog(req EpilogRequest) error {
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return Invalid("argv", "a command is required")
	}
	for i, a := range req.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return Invalid("argv", "argument %d contains a NUL byte", i)
		}
	}
	for i, e := range req.Env {
		k, _, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			return Invalid("env", "entry %d (%s) is not of the form KEY=VALUE", i, Quote(e))
		}
		if strings.IndexByte(e, 0) >= 0 {
			return Invalid("env", "entry %d contains a NUL byte", i)
		}
	}
	if req.Dir != "" && (!strings.HasPrefix(req.Dir, "/") || strings.IndexByte(req.Dir, 0) >= 0) {
		return Invalid("dir", "working directory %s is not an absolute path", Quote(req.Dir))
	}
	return ValidateCgroup(req.Cgroup)
}

const expirationForms = "want RFC 3339 such as 2024-05-01T12:00:00Z, Unix seconds such as 1700000000 or 1700000000.5, or 0 for no expiration"

// ParseExpiration parses a job's expiration E: RFC 3339 (with or without
// fractional seconds), or Unix seconds as a decimal string, fractions
// allowed (Flux writes "1700000000.5"). A value of zero ("0", "0.0") means
// the job has no expiration and returns none=true.
//
// It refuses, with an *InputError of Field "expiration", what is not a time,
// a time more than maxAge before now (maxAge <= 0 disables this check) and a
// time more than MaxExpirationAhead after now (milliseconds given as
// seconds).
func ParseExpiration(s string, now time.Time, maxAge time.Duration) (e time.Time, none bool, err error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, false, Invalid("expiration", "an expiration is required (%s)", expirationForms)
	}
	if isDecimal(s) {
		sec, nsec, ok := parseUnix(s)
		if !ok {
			return time.Time{}, false, Invalid("expiration", "%s is out of range (%s)", Quote(s), expirationForms)
		}
		if sec == 0 && nsec == 0 {
			return time.Time{}, true, nil
		}
		// Refused here, before it is a time: parseUnix clamps what no
		// time.Time holds, and a date printed from the clamped value
		// (or from one beyond the year 9999) would be wrong.
		if last := now.Add(MaxExpirationAhead); sec > last.Unix() {
			return time.Time{}, false, Invalid("expiration", "%s is out of range: Unix seconds up to %d (%s, 10 years from now) are accepted (milliseconds given as seconds?)",
				Quote(s), last.Unix(), last.UTC().Format(time.RFC3339))
		}
		e = time.Unix(sec, nsec).UTC()
	} else {
		t, perr := time.Parse(time.RFC3339Nano, s)
		if perr != nil {
			return time.Time{}, false, Invalid("expiration", "not a time: %s (%s)", Quote(s), expirationForms)
		}
		e = t
	}
	if maxAge > 0 && now.Sub(e) > maxAge {
		return time.Time{}, false, Invalid("expiration", "%s is %s in the past (more than %s)",
			e.UTC().Format(time.RFC3339Nano), humanDuration(now.Sub(e)), maxAge)
	}
	if e.Sub(now) > MaxExpirationAhead {
		return time.Time{}, false, Invalid("expiration", "%s is %s in the future (more than 10 years: milliseconds given as seconds?)",
			e.UTC().Format(time.RFC3339Nano), humanDuration(e.Sub(now)))
	}
	return e, false, nil
}

// isDecimal reports whether s is digits with at most one '.' and at least
// one digit.
func isDecimal(s string) bool {
	digits, dots := 0, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '.':
			dots++
		default:
			return false
		}
	}
	return digits > 0 && dots <= 1
}

// parseUnix splits a decimal string into seconds and nanoseconds without
// going through float64 (which would lose the fraction of large values).
// Digits past nanoseconds are dropped.
func parseUnix(s string) (sec, nsec int64, ok bool) {
	ip, fp, _ := strings.Cut(s, ".")
	if ip == "" {
		ip = "0"
	}
	sec, err := strconv.ParseInt(ip, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	if len(fp) > 9 {
		fp = fp[:9]
	}
	if fp != "" {
		n, err := strconv.ParseInt(fp, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		for i := len(fp); i < 9; i++ {
			n *= 10
		}
		nsec = n
	}
	// time.Unix is exact only within about ±292 years of its internal
	// epoch; far beyond that the range checks refuse the value anyway, but
	// keep the arithmetic well clear of overflow.
	const limit = 1 << 40
	if sec > limit {
		sec = limit
	}
	return sec, nsec, true
}

// humanDuration writes long durations in years and days ("25y62d") and short
// ones in Go syntax.
func humanDuration(d time.Duration) string {
	const day = 24 * time.Hour
	const year = 365 * day
	switch {
	case d >= year:
		return fmt.Sprintf("%dy%dd", d/year, (d%year)/day)
	case d >= 2*day:
		return fmt.Sprintf("%dd%dh", d/day, (d%day)/time.Hour)
	default:
		return d.Round(time.Second).String()
	}
}

// CheckRegistration checks the fields every registration of a job carries,
// wherever it arrives (the agent's POST /v1/jobs, the aggregator's): the
// job id, the expiration (its form only: how old it may be is the caller's
// check, against its own clock and configuration) and, when given, the
// grace period.
func CheckRegistration(job, expiration, grace string, now time.Time) error {
	if err := ValidateJobID(job); err != nil {
		return err
	}
	if _, _, err := ParseExpiration(expiration, now, 0); err != nil {
		return err
	}
	if grace != "" {
		if _, err := ParseGrace(grace); err != nil {
			return err
		}
	}
	return nil
}

// ParseGrace parses a job's grace period: a Go duration ("90s", "2m30s") or
// whole seconds ("90"), neither negative nor longer than MaxGrace. An empty
// string is an error: callers that treat it as "the default" check first.
// It returns an *InputError with Field "grace".
func ParseGrace(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	const forms = "want a duration such as 90s or 2m, or whole seconds"
	if s == "" {
		return 0, Invalid("grace", "grace is empty (%s)", forms)
	}
	var d time.Duration
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 {
			return 0, Invalid("grace", "grace %s is negative", Quote(s))
		}
		if n > int64(MaxGrace/time.Second) {
			return 0, Invalid("grace", "grace %s is longer than %s", Quote(s), MaxGrace)
		}
		d = time.Duration(n) * time.Second
	} else {
		v, err := time.ParseDuration(s)
		if err != nil {
			return 0, Invalid("grace", "not a duration: %s (%s)", Quote(s), forms)
		}
		d = v
	}
	if d < 0 {
		return 0, Invalid("grace", "grace %s is negative", Quote(s))
	}
	if d > MaxGrace {
		return 0, Invalid("grace", "grace %s is longer than %s", Quote(s), MaxGrace)
	}
	return d, nil
}

// rV1 is the part of Flux's R version 1 (RFC 20) that the agent reads.
// Unknown keys (scheduling, attributes, properties) are ignored.
type rV1 struct {
	Version   *float64 `json:"version"`
	Execution *struct {
		RLite      json.RawMessage `json:"R_lite"`
		StartTime  *float64        `json:"starttime"`
		Expiration *float64        `json:"expiration"`
		NodeList   []string        `json:"nodelist"`
	} `json:"execution"`
}

// RNoExpiration is what Fluxion writes as execution.expiration for a job
// without a time limit: the largest int64 count of nanoseconds, in whole
// seconds (9223372036, the year 2262). ParseR reads it (with any fraction)
// as no expiration, as sched-simple's 0.0. Other times that far ahead stay
// errors of the caller's range check (milliseconds given as seconds).
const RNoExpiration = 9223372036

// ParseR reads a Flux resource set, R version 1 (flux-framework RFC 20),
// and returns execution.expiration in Unix seconds; 0 means no expiration,
// as does an absent expiration (RFC 20: "the resource set has no specified
// end time") and RNoExpiration. Times may be integers (Fluxion) or floats
// (sched-simple). The errors name the field that is wrong.
func ParseR(data []byte) (expiration float64, err error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return 0, errors.New("resource set R is empty")
	}
	var r rV1
	if err := json.Unmarshal(data, &r); err != nil {
		return 0, DescribeJSONError("resource set R", err)
	}
	switch {
	case r.Version == nil:
		return 0, errors.New("resource set R: version: missing (want 1)")
	case *r.Version != 1:
		return 0, fmt.Errorf("resource set R: version: got %v, only version 1 is supported", *r.Version)
	case r.Execution == nil:
		return 0, errors.New("resource set R: execution: missing")
	}
	x := r.Execution
	if len(bytes.TrimSpace(x.RLite)) == 0 || bytes.Equal(bytes.TrimSpace(x.RLite), []byte("null")) {
		return 0, errors.New("resource set R: execution.R_lite: missing")
	}
	if bytes.TrimSpace(x.RLite)[0] != '[' {
		return 0, errors.New("resource set R: execution.R_lite: want a list")
	}
	if x.StartTime != nil && (*x.StartTime < 0 || math.IsNaN(*x.StartTime)) {
		return 0, fmt.Errorf("resource set R: execution.starttime: %v is negative", *x.StartTime)
	}
	if x.Expiration == nil {
		return 0, nil
	}
	e := *x.Expiration
	if e < 0 || math.IsNaN(e) || math.IsInf(e, 0) {
		return 0, fmt.Errorf("resource set R: execution.expiration: %v is negative", e)
	}
	if math.Floor(e) == RNoExpiration {
		return 0, nil
	}
	if e > 0 && x.StartTime != nil && e <= *x.StartTime {
		return 0, fmt.Errorf("resource set R: execution.expiration %v is not after execution.starttime %v",
			e, *x.StartTime)
	}
	return e, nil
}

// FormatUnix writes Unix seconds as ParseExpiration reads them, without an
// exponent ("1700000000.5", "0").
func FormatUnix(sec float64) string {
	return strconv.FormatFloat(sec, 'f', -1, 64)
}

// DescribeJSONError turns an encoding/json error into a message that says
// where the problem is: the offset of a syntax error, the field of a type
// error (jsonbody.Classify).
func DescribeJSONError(what string, err error) error {
	return fmt.Errorf("%s: %w", what, jsonbody.Classify(err, 0))
}

// ParseSchedulerGrace parses JobStartRequest.PlanGrace as ParseGrace does,
// its errors naming the field "plan_grace".
func ParseSchedulerGrace(s string) (time.Duration, error) {
	g, err := ParseGrace(s)
	var ie *InputError
	if errors.As(err, &ie) {
		return 0, Invalid("plan_grace", "%s", ie.Msg)
	}
	return g, err
}
