package httpapi

import (
	"testing"
	"time"
)

// FuzzGraceQuery feeds GET /v1/grace's query parser arbitrary queries: it
// never panics, and what it accepts is within the bounds.
func FuzzGraceQuery(f *testing.F) {
	for _, q := range []string{"", "from=2025-06-01T00:00:00Z&to=1748822400", "nodes=n[1-4,7]&g=10s,30,1m&top=5&top_g=95s", "g=" + string(make([]byte, 100)), "nodes=a[1-100000000]", "%zz"} {
		f.Add(q)
	}
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, raw string) {
		p, err := parseGraceQuery(raw, now)
		if err != nil {
			return
		}
		if !p.from.Before(p.to) || len(p.g) > 32 || len(p.set) > maxGraceNodes || p.top < 0 || p.top > 50 {
			t.Fatalf("accepted out of bounds: %+v", p)
		}
		for _, g := range p.g {
			if g < minCandidate || g > maxCandidate {
				t.Fatalf("candidate %v", g)
			}
		}
	})
}
