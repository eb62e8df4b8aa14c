package request

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// MaxEventlog bounds a Flux job eventlog read by ParsePlanGrace (RFC 18:
// one JSON event per line; a job's eventlog holds a few dozen events, a
// long-pending job's updates some more: the agent reads it from a prolog,
// so it has a bound of its own).
const MaxEventlog = 4 << 20

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

// Keys of a jobspec-update event's context (RFC 21: each key a period-
// delimited path into the jobspec) that ParsePlanGrace follows.
const (
	keyDuration = "attributes.system.duration"
	keyRecord   = "attributes.system.gracewatch"
)

// ParsePlanGrace reads a Flux job's eventlog (RFC 18, as `flux job info
// ID eventlog` prints it) and returns the plugin's record, and whether
// there is one that still holds.
//
// The record is taken from the job's jobspec-update events only, never
// from the submitted jobspec: a user may write any attributes.system into
// what they submit, but only the job manager posts jobspec-update events,
// and the only key of the record it takes from a request (flux update) is
// the one the plugin itself adds (its job.update.attributes.system.duration
// callback; any other key is refused, "update of ... not supported"). A
// record a user wrote without the plugin (never loaded, or removed) would
// make E earlier than the exec system's end, and the teardown be drained
// with no grace at all.
//
// The record holds when the last duration and the last record the events
// set still satisfy duration == T + G with T > 0: not after a flux update
// made without the plugin, not without a time limit. Errors name the line
// and the field that is wrong.
func ParsePlanGrace(eventlog []byte) (PlanGrace, bool, error) {
	if len(eventlog) > MaxEventlog {
		return PlanGrace{}, false, fmt.Errorf("eventlog: %d bytes, more than %d", len(eventlog), MaxEventlog)
	}
	if len(bytes.TrimSpace(eventlog)) == 0 {
		return PlanGrace{}, false, errors.New("eventlog is empty")
	}
	var (
		duration *float64
		rec      *planRecord
		recLine  int
	)
	for i, line := range bytes.Split(eventlog, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		where := fmt.Sprintf("eventlog line %d", i+1)
		var ev struct {
			Name    *string                    `json:"name"`
			Context map[string]json.RawMessage `json:"context"`
		}
		if err := json.Unmarshal(line, &ev); err != nil {
			return PlanGrace{}, false, DescribeJSONError(where, err)
		}
		if ev.Name == nil {
			return PlanGrace{}, false, fmt.Errorf("%s: an event without a name", where)
		}
		if *ev.Name != "jobspec-update" {
			continue
		}
		if v, ok := ev.Context[keyDuration]; ok {
			var d float64
			if err := json.Unmarshal(v, &d); err != nil {
				return PlanGrace{}, false, DescribeJSONError(where+": "+keyDuration, err)
			}
			duration = &d
		}
		if v, ok := ev.Context[keyRecord]; ok {
			var r planRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return PlanGrace{}, false, DescribeJSONError(where+": "+keyRecord, err)
			}
			rec, recLine = &r, i+1
		}
	}
	if rec == nil {
		return PlanGrace{}, false, nil
	}
	where := fmt.Sprintf("eventlog line %d: %s", recLine, keyRecord)
	bad := func(v *float64) bool { return v == nil || *v < 0 || math.IsNaN(*v) || math.IsInf(*v, 0) }
	switch {
	case bad(rec.Duration):
		return PlanGrace{}, false, fmt.Errorf("%s.duration: missing or not a non-negative number", where)
	case bad(rec.Grace):
		return PlanGrace{}, false, fmt.Errorf("%s.grace: missing or not a non-negative number", where)
	case *rec.Grace > MaxGrace.Seconds():
		return PlanGrace{}, false, fmt.Errorf("%s.grace: %vs is longer than %s", where, *rec.Grace, MaxGrace)
	}
	if duration == nil || *rec.Duration <= 0 || math.Abs(*duration-(*rec.Duration+*rec.Grace)) >= planEpsilon {
		return PlanGrace{}, false, nil
	}
	return PlanGrace{Duration: *rec.Duration, Grace: *rec.Grace}, true, nil
}

// planRecord is attributes.system.gracewatch as the plugin writes it.
type planRecord struct {
	Duration *float64 `json:"duration"`
	Grace    *float64 `json:"grace"`
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
