package request

import (
	"math"
	"strings"
	"testing"
	"time"
)

// A jobspec as the gracewatch jobtap plugin leaves it (flux job info ID
// jobspec, trimmed): T = 5 s, G = 10 s.
const planJobspec = `{"version": 1, "attributes": {"system": {"duration": 15.0, "cwd": "/tmp",
 "gracewatch": {"duration": 5.0, "grace": 10.0}}}, "tasks": [], "resources": []}`

func TestParsePlanGrace(t *testing.T) {
	for _, tt := range []struct {
		name, jobspec string
		want          PlanGrace
		ok            bool
		err           string
	}{
		{"plugin's record", planJobspec, PlanGrace{5, 10}, true, ""},
		{"G = 0", `{"attributes": {"system": {"duration": 5, "gracewatch": {"duration": 5, "grace": 0}}}}`, PlanGrace{5, 0}, true, ""},
		{"no record: submitted without the plugin", `{"attributes": {"system": {"duration": 15}}}`, PlanGrace{}, false, ""},
		{"no attributes", `{"version": 1}`, PlanGrace{}, false, ""},
		{"duration changed since (flux update without the plugin)", `{"attributes": {"system": {"duration": 30, "gracewatch": {"duration": 5, "grace": 10}}}}`, PlanGrace{}, false, ""},
		{"no time limit", `{"attributes": {"system": {"duration": 0, "gracewatch": {"duration": 0, "grace": 0}}}}`, PlanGrace{}, false, ""},
		{"negative grace", `{"attributes": {"system": {"duration": 5, "gracewatch": {"duration": 6, "grace": -1}}}}`, PlanGrace{}, false, "gracewatch.grace"},
		{"grace over a week", `{"attributes": {"system": {"duration": 700000, "gracewatch": {"duration": 5, "grace": 699995}}}}`, PlanGrace{}, false, "longer than"},
		{"record without duration", `{"attributes": {"system": {"duration": 5, "gracewatch": {"grace": 1}}}}`, PlanGrace{}, false, "gracewatch.duration"},
		{"record of the wrong type", `{"attributes": {"system": {"gracewatch": "5"}}}`, PlanGrace{}, false, "jobspec"},
		{"empty", ` `, PlanGrace{}, false, "empty"},
		{"too long", strings.Repeat(" ", MaxJobspec+1), PlanGrace{}, false, "more than"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, err := ParsePlanGrace([]byte(tt.jobspec))
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
// jobspec.
func FuzzParsePlanGrace(f *testing.F) {
	f.Add([]byte(planJobspec))
	f.Add([]byte(`{"attributes": {"system": {"duration": 1e308, "gracewatch": {"duration": 1e308, "grace": 1}}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, ok, err := ParsePlanGrace(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "jobspec") {
				t.Fatalf("error %q does not say it is about the jobspec", err)
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
