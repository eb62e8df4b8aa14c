package replay

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"time"
)

// Kind is what an injected teardown does.
type Kind string

// The kinds of teardown: a fast one ends by itself at once, a slow one by
// itself within G, a hung one only when it is killed (gracewatch's agent at
// D, Slurm's PrologEpilogTimeout) or its hang is cleared.
const (
	Fast Kind = "fast"
	Slow Kind = "slow"
	Hung Kind = "hung"
)

// Model is the seeded teardown model of a replay: each node's teardown of
// each job draws its kind and duration from (Seed, trace job, rank), so
// that every run of the same window sees the same teardowns whatever node
// the scheduler chose, and a teardown hung at a hang rate is hung at every
// higher one (the draw is the same; only the threshold moves).
type Model struct {
	Seed uint64
	// HungRate and SlowRate are the fractions of node teardowns that
	// hang and that are slow; the rest are fast.
	HungRate, SlowRate float64
	// A fast teardown lasts up to FastMax; a slow one between SlowMin and
	// SlowMax, which must be below G.
	FastMax, SlowMin, SlowMax time.Duration
}

// Teardown is one node's drawn teardown; Duration is zero for a hung one.
type Teardown struct {
	Kind     Kind
	Duration time.Duration
}

// Validate checks the rates and that slow teardowns end within grace.
func (m Model) Validate(grace time.Duration) error {
	switch {
	case m.HungRate < 0 || m.SlowRate < 0 || m.HungRate+m.SlowRate > 1:
		return fmt.Errorf("replay: hung rate %g and slow rate %g: want each ≥ 0 and their sum ≤ 1", m.HungRate, m.SlowRate)
	case m.FastMax < 0 || m.SlowMin < 0 || m.SlowMin > m.SlowMax:
		return errors.New("replay: teardown durations: want 0 ≤ fast max, 0 ≤ slow min ≤ slow max")
	case m.SlowMax >= grace:
		return fmt.Errorf("replay: a slow teardown of up to %v does not end within G %v", m.SlowMax, grace)
	}
	return nil
}

// Teardown draws the teardown of the rank-th node (in the order their
// epilogues start) of trace job id.
func (m Model) Teardown(id int64, rank int) Teardown {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d", id, rank)
	r := rand.New(rand.NewPCG(m.Seed, h.Sum64()))
	u, v := r.Float64(), r.Float64()
	switch {
	case u < m.HungRate:
		return Teardown{Kind: Hung}
	case u < m.HungRate+m.SlowRate:
		return Teardown{Kind: Slow, Duration: m.SlowMin + time.Duration(v*float64(m.SlowMax-m.SlowMin))}
	default:
		return Teardown{Kind: Fast, Duration: time.Duration(v * float64(m.FastMax))}
	}
}
