package request

import (
	"math"
	"strings"
	"testing"
	"time"
)

// An eventlog as the gracewatch jobtap plugin leaves it (flux job info ID
// eventlog, trimmed): the user submitted T = 5 s, the plugin's update at
// job.validate added G = 10 s.
const planEventlog = `{"timestamp":1733550000.1,"name":"submit","context":{"userid":1000,"urgency":16,"flags":0,"version":1}}
{"timestamp":1733550000.1,"name":"jobspec-update","context":{"attributes.system.duration":15.0,"attributes.system.gracewatch":{"duration":5.0,"grace":10.0}}}
{"timestamp":1733550000.2,"name":"validate"}
{"timestamp":1733550000.2,"name":"depend"}
{"timestamp":1733550000.2,"name":"priority","context":{"priority":16}}
{"timestamp":1733550000.3,"name":"alloc"}
`

// update is a jobspec-update event line with context ctx.
func update(ctx string) string {
	return `{"timestamp":1733550001,"name":"jobspec-update","context":` + ctx + "}\n"
}

func TestParsePlanGrace(t *testing.T) {
	submit := `{"timestamp":1,"name":"submit","context":{"userid":1000}}` + "\n"
	for _, tt := range []struct {
		name, eventlog string
		want           PlanGrace
		ok             bool
		err            string
	}{
		{"plugin's record", planEventlog, PlanGrace{5, 10}, true, ""},
		{"G = 0", submit + update(`{"attributes.system.duration": 5, "attributes.system.gracewatch": {"duration": 5, "grace": 0}}`), PlanGrace{5, 0}, true, ""},
		{"no update: submitted without the plugin", submit, PlanGrace{}, false, ""},
		{"flux update duration with the plugin, then its G again", planEventlog +
			update(`{"attributes.system.duration": 30, "attributes.system.gracewatch": {"duration": 30, "grace": 0}}`) +
			update(`{"attributes.system.duration": 40, "attributes.system.gracewatch": {"duration": 30, "grace": 10}}`), PlanGrace{30, 10}, true, ""},
		{"flux update duration after the plugin was removed", planEventlog + update(`{"attributes.system.duration": 30}`), PlanGrace{}, false, ""},
		{"another key updated later: the record still holds", planEventlog + update(`{"attributes.system.queue": "debug"}`), PlanGrace{5, 10}, true, ""},
		{"no time limit", submit + update(`{"attributes.system.duration": 0, "attributes.system.gracewatch": {"duration": 0, "grace": 0}}`), PlanGrace{}, false, ""},
		{"negative grace", submit + update(`{"attributes.system.duration": 5, "attributes.system.gracewatch": {"duration": 6, "grace": -1}}`), PlanGrace{}, false, "line 2: attributes.system.gracewatch.grace"},
		{"grace over a week", submit + update(`{"attributes.system.duration": 700000, "attributes.system.gracewatch": {"duration": 5, "grace": 699995}}`), PlanGrace{}, false, "longer than"},
		{"record without duration", submit + update(`{"attributes.system.duration": 5, "attributes.system.gracewatch": {"grace": 1}}`), PlanGrace{}, false, "gracewatch.duration"},
		{"record of the wrong type", submit + update(`{"attributes.system.gracewatch": "5"}`), PlanGrace{}, false, "eventlog line 2: attributes.system.gracewatch"},
		{"duration of the wrong type", submit + update(`{"attributes.system.duration": "5m"}`), PlanGrace{}, false, "eventlog line 2: attributes.system.duration"},
		{"a line that is not JSON", submit + "not an event\n", PlanGrace{}, false, "eventlog line 2"},
		{"an event without a name", `{"timestamp":1}`, PlanGrace{}, false, "eventlog line 1: an event without a name"},
		{"empty", ` `, PlanGrace{}, false, "empty"},
		{"too long", strings.Repeat(" ", MaxEventlog+1), PlanGrace{}, false, "more than"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, err := ParsePlanGrace([]byte(tt.eventlog))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one naming %q", err, tt.err)
				}
				return
			}
			if err != nil || ok != tt.ok || got != tt.want {
				t.Fatalf("got %+v %v %v, want %+v %v", got, ok, err, tt.want, tt.ok)
			}
		})
	}
}

// TestParsePlanGraceIgnoresTheSubmittedRecord: a record the user wrote
// into the jobspec they submitted never reaches the eventlog's updates; an
// eventlog that names it anywhere but in a jobspec-update's context (the
// submit event's context, another event's) is not the plugin's.
func TestParsePlanGraceIgnoresTheSubmittedRecord(t *testing.T) {
	forged := `{"timestamp":1,"name":"submit","context":{"userid":1000,"attributes.system.duration":15,"attributes.system.gracewatch":{"duration":5,"grace":10}}}
{"timestamp":2,"name":"memo","context":{"attributes.system.duration":15,"attributes.system.gracewatch":{"duration":5,"grace":10}}}
`
	if p, ok, err := ParsePlanGrace([]byte(forged)); ok || err != nil {
		t.Fatalf("took %+v (%v) from events that are not jobspec-update", p, err)
	}
}

func TestUserExpiration(t *testing.T) {
	r := func(start, exp string) []byte {
		return []byte(`{"version": 1, "execution": {"R_lite": [{"rank": "0", "children": {"core": "0"}}], "starttime": ` + start + `, "expiration": ` + exp + `}}`)
	}
	p := PlanGrace{Duration: 5, Grace: 10}
	for _, tt := range []struct {
		name string
		r    []byte
		want float64
	}{
		{"the scheduler's R: E + G", r("1000", "1015"), 1005},
		{"after the plugin's resource-update: E", r("1000", "1005"), 1005},
		{"clipped by the instance's end before E", r("1000", "1003"), 1003},
		{"no time limit (Fluxion)", r("1000", "9223372036"), 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := UserExpiration(tt.r, p)
			if err != nil || got != tt.want {
				t.Fatalf("got %v %v, want %v", got, err, tt.want)
			}
		})
	}
	if _, err := UserExpiration([]byte(`{}`), p); err == nil {
		t.Fatal("an R without version was accepted")
	}
	if g := (PlanGrace{Grace: 2.5}).GraceDuration(); g != 2500*time.Millisecond {
		t.Fatalf("GraceDuration = %v", g)
	}
}

// FuzzParsePlanGrace: never panics; a record it accepts has finite,
// non-negative T > 0 and G within MaxGrace; errors say they are about the
// eventlog.
func FuzzParsePlanGrace(f *testing.F) {
	f.Add([]byte(planEventlog))
	f.Add([]byte(update(`{"attributes.system.duration": 1e308, "attributes.system.gracewatch": {"duration": 1e308, "grace": 1}}`)))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, ok, err := ParsePlanGrace(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "eventlog") {
				t.Fatalf("error %q does not say it is about the eventlog", err)
			}
			return
		}
		if !ok {
			return
		}
		if !(p.Duration > 0) || math.IsInf(p.Duration, 0) || p.Grace < 0 || p.Grace > MaxGrace.Seconds() {
			t.Fatalf("accepted %+v", p)
		}
	})
}
