package request

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// MaxJobspec bounds a Flux jobspec read by ParsePlanGrace (a jobspec
// holds the job's command, environment and shell options: Flux's own
// limit on a submitted jobspec is far above what a job needs, but the
// agent reads it from a prolog, so it has one of its own).
const MaxJobspec = 4 << 20

// PlanGrace is what the gracewatch jobtap plugin of Flux's job manager
// (flux/jobtap/gracewatch.c) recorded in a job's jobspec: the user's own
// time limit and the grace G it added to the duration the scheduler plans
// with (attributes.system.gracewatch {"duration": T, "grace": G}, with
// attributes.system.duration = T + G).
type PlanGrace struct {
	Duration float64 // T, seconds
	Grace    float64 // G, seconds
}

// planEpsilon is how close duration and T + G must be (the plugin's own
// EPSILON).
const planEpsilon = 1e-3

// ParsePlanGrace reads a Flux jobspec (RFC 25, JSON) and returns the
// plugin's record, and whether there is one that still holds: a jobspec
// whose duration is not T + G (submitted without the plugin, or changed
// since) or without a time limit has none. Errors name the field that is
// wrong.
func ParsePlanGrace(data []byte) (PlanGrace, bool, error) {
	if len(data) > MaxJobspec {
		return PlanGrace{}, false, fmt.Errorf("jobspec: %d bytes, more than %d", len(data), MaxJobspec)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return PlanGrace{}, false, errors.New("jobspec is empty")
	}
	var js struct {
		Attributes *struct {
			System *struct {
				Duration   *float64 `json:"duration"`
				Gracewatch *struct {
					Duration *float64 `json:"duration"`
					Grace    *float64 `json:"grace"`
				} `json:"gracewatch"`
			} `json:"system"`
		} `json:"attributes"`
	}
	if err := json.Unmarshal(data, &js); err != nil {
		return PlanGrace{}, false, DescribeJSONError("jobspec", err)
	}
	if js.Attributes == nil || js.Attributes.System == nil || js.Attributes.System.Gracewatch == nil {
		return PlanGrace{}, false, nil
	}
	sys := js.Attributes.System
	rec := sys.Gracewatch
	bad := func(v *float64) bool { return v == nil || *v < 0 || math.IsNaN(*v) || math.IsInf(*v, 0) }
	switch {
	case bad(rec.Duration):
		return PlanGrace{}, false, errors.New("jobspec: attributes.system.gracewatch.duration: missing or not a non-negative number")
	case bad(rec.Grace):
		return PlanGrace{}, false, errors.New("jobspec: attributes.system.gracewatch.grace: missing or not a non-negative number")
	case *rec.Grace > MaxGrace.Seconds():
		return PlanGrace{}, false, fmt.Errorf("jobspec: attributes.system.gracewatch.grace: %vs is longer than %s", *rec.Grace, MaxGrace)
	}
	if sys.Duration == nil || *rec.Duration <= 0 || math.Abs(*sys.Duration-(*rec.Duration+*rec.Grace)) >= planEpsilon {
		return PlanGrace{}, false, nil
	}
	return PlanGrace{Duration: *rec.Duration, Grace: *rec.Grace}, true, nil
}

// GraceDuration is G as a time.Duration, to the millisecond.
func (p PlanGrace) GraceDuration() time.Duration {
	return time.Duration(math.Round(p.Grace*1000)) * time.Millisecond
}

// UserExpiration returns the job's own expiration E from its R (as
// ParseR reads it) and the plugin's record: min(starttime + T,
// expiration). The scheduler's R carries E + G; once the plugin's
// resource-update is applied it carries E: both give E. Without a
// starttime in R, or without an expiration, it returns R's.
func UserExpiration(r []byte, p PlanGrace) (float64, error) {
	e, err := ParseR(r)
	if err != nil || e == 0 {
		return e, err
	}
	var x rV1
	if err := json.Unmarshal(r, &x); err != nil {
		return 0, DescribeJSONError("resource set R", err)
	}
	if x.Execution.StartTime == nil || *x.Execution.StartTime <= 0 {
		return e, nil
	}
	return math.Min(*x.Execution.StartTime+p.Duration, e), nil
}
