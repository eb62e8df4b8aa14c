package replay

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Record is what a harness saw in one run; Compute turns it into Figures.
type Record struct {
	// Run names the run ("slurm-alone", "drain", "drain+plan").
	Run string
	// Begin is the window's first submit; End when the run was cut or
	// the last job and teardown ended.
	Begin, End time.Time
	Nodes      []string
	Jobs       []JobRecord
	Teardowns  []TeardownRecord
	// States are each node's scheduler states, sampled: an interval per
	// run of the same state.
	States []StateInterval
	// Drains are the nodes the scheduler showed drained, once per drain.
	Drains []DrainRecord
	// Commands and Writes are the scheduler commands gracewatch issued
	// (its actuators and reservations), and of those the ones that
	// changed something (update, create, delete).
	Commands, Writes int
	// Reservations is how many reservations gracewatch created.
	Reservations int
	// Tau is the bounded slowdown's floor on the run time (10 s of trace
	// time, in real time).
	Tau time.Duration
}

// JobRecord is one replayed job; Start and End are zero if it never
// started or ended.
type JobRecord struct {
	TraceID            int64
	ID                 string
	Nodes              []string
	Submit, Start, End time.Time
}

// TeardownRecord is one node's teardown of a job: when its epilogue started
// and ended (zero: not seen to end; Cleared then bounds it), its drawn
// kind, and its D.
type TeardownRecord struct {
	Job, Node           string
	Kind                Kind
	Start, End, Cleared time.Time
	D                   time.Time
}

// StateInterval is a node in one scheduler state (sinfo's %T) from From to
// To.
type StateInterval struct {
	Node, State string
	From, To    time.Time
}

// DrainRecord is a node seen drained: At is the earliest time known to be
// after the drain (the scheduler's reason stamp + 1 s, or when it was first
// seen, whichever is earlier); Reason is the scheduler's reason.
type DrainRecord struct {
	Node, Reason string
	At           time.Time
}

// Figures are a run's results.
type Figures struct {
	Run                          string
	Jobs, Started                int
	LostNodeHours                float64 // TeardownNodeHours + HeldNodeHours
	TeardownNodeHours            float64 // completing, draining, drained, down
	HeldNodeHours                float64 // planned or reserved: idle, held for a plan
	WaitMean, WaitP95            time.Duration
	BoundedSlowdown              float64 // mean
	Makespan                     time.Duration
	OnTearingDown                int // job starts on a node whose teardown had not ended
	Hung, Drains, FalseDrains    int
	DrainedLate                  int // hung teardowns not drained within 2 s of D
	DownAfterDP50, DownAfterDP99 time.Duration
	Commands, Writes             int
	Violations                   []string // what OnTearingDown, FalseDrains and DrainedLate count
}

// DrainWithin is how soon after D a hung node must be shown drained.
const DrainWithin = 2 * time.Second

// Lost states: a node tearing down, or taken out after a hung teardown;
// idle ones count as held while a job is waiting (Slurm's "planned" is an
// idle node kept for a waiting job, "reserved" one held by a reservation).
var (
	teardownStates = []string{"completing", "draining", "drained", "down", "fail", "failing"}
	idleStates     = []string{"idle", "planned", "reserved"}
)

// pending is the union of the times some job was waiting (submitted, not
// started), sorted.
func (r Record) pending() [][2]time.Time {
	var iv [][2]time.Time
	for _, j := range r.Jobs {
		end := j.Start
		if end.IsZero() {
			end = r.End
		}
		if j.Submit.Before(end) {
			iv = append(iv, [2]time.Time{j.Submit, end})
		}
	}
	slices.SortFunc(iv, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
	var out [][2]time.Time
	for _, x := range iv {
		if n := len(out); n > 0 && !x[0].After(out[n-1][1]) {
			if x[1].After(out[n-1][1]) {
				out[n-1][1] = x[1]
			}
			continue
		}
		out = append(out, x)
	}
	return out
}

// overlap is how much of [from, to) lies within the sorted intervals.
func overlap(from, to time.Time, iv [][2]time.Time) time.Duration {
	var d time.Duration
	for _, x := range iv {
		lo, hi := from, to
		if x[0].After(lo) {
			lo = x[0]
		}
		if x[1].Before(hi) {
			hi = x[1]
		}
		if hi.After(lo) {
			d += hi.Sub(lo)
		}
	}
	return d
}

func stateIn(state string, set []string) bool {
	s := strings.TrimRight(state, "*~#!%$@^-")
	for _, x := range set {
		if s == x || strings.HasPrefix(s, x+"+") {
			return true
		}
	}
	return false
}

// Compute computes the figures of r.
func Compute(r Record) Figures {
	f := Figures{Run: r.Run, Jobs: len(r.Jobs), Commands: r.Commands, Writes: r.Writes}
	pending := r.pending()
	for _, s := range r.States {
		switch {
		case stateIn(s.State, teardownStates):
			f.TeardownNodeHours += s.To.Sub(s.From).Hours()
		case stateIn(s.State, idleStates):
			f.HeldNodeHours += overlap(s.From, s.To, pending).Hours()
		}
	}
	f.LostNodeHours = f.TeardownNodeHours + f.HeldNodeHours
	var waits []time.Duration
	var bsld float64
	last := r.Begin
	for _, j := range r.Jobs {
		if j.Start.IsZero() {
			continue
		}
		f.Started++
		wait := j.Start.Sub(j.Submit)
		waits = append(waits, wait)
		end := j.End
		if end.IsZero() {
			end = r.End
		}
		run := end.Sub(j.Start)
		bsld += math.Max(1, (wait+run).Seconds()/math.Max(run.Seconds(), r.Tau.Seconds()))
		if end.After(last) {
			last = end
		}
		for _, n := range j.Nodes {
			for _, td := range r.Teardowns {
				if td.Node == n && td.Start.Before(j.Start) && j.Start.Before(td.until(r.End)) {
					f.OnTearingDown++
					f.Violations = append(f.Violations, fmt.Sprintf("job %s started on %s at +%v while job %s's teardown there (from +%v) had not ended",
						j.ID, n, rel(r.Begin, j.Start), td.Job, rel(r.Begin, td.Start)))
				}
			}
		}
	}
	if len(waits) > 0 {
		var sum time.Duration
		for _, w := range waits {
			sum += w
		}
		f.WaitMean = sum / time.Duration(len(waits))
		f.WaitP95 = quantile(waits, 0.95)
		f.BoundedSlowdown = bsld / float64(len(waits))
	}
	f.Makespan = last.Sub(r.Begin)

	// Each drain belongs to the latest teardown of its node that started
	// before it: a false drain is one whose teardown was not hung.
	var after []time.Duration
	for _, d := range r.Drains {
		f.Drains++
		td, ok := r.teardownBefore(d.Node, d.At)
		if !ok || td.Kind != Hung {
			f.FalseDrains++
			f.Violations = append(f.Violations, fmt.Sprintf("%s drained at +%v (%q) with no hung teardown", d.Node, rel(r.Begin, d.At), d.Reason))
		}
	}
	for _, td := range r.Teardowns {
		if td.Kind != Hung {
			continue
		}
		f.Hung++
		d, ok := r.drainAfter(td)
		switch {
		case !ok:
			f.DrainedLate++
			f.Violations = append(f.Violations, fmt.Sprintf("job %s's hung teardown on %s (D +%v) never drained", td.Job, td.Node, rel(r.Begin, td.D)))
			continue
		case d.At.Sub(td.D) > DrainWithin:
			f.DrainedLate++
			f.Violations = append(f.Violations, fmt.Sprintf("job %s's hung teardown on %s drained D + %v (%q), want within %v",
				td.Job, td.Node, d.At.Sub(td.D).Round(time.Millisecond), d.Reason, DrainWithin))
		}
		after = append(after, d.At.Sub(td.D))
	}
	if len(after) > 0 {
		f.DownAfterDP50, f.DownAfterDP99 = quantile(after, 0.5), quantile(after, 0.99)
	}
	return f
}

func (td TeardownRecord) until(end time.Time) time.Time {
	switch {
	case !td.End.IsZero():
		return td.End
	case !td.Cleared.IsZero():
		return td.Cleared
	}
	return end
}

func (r Record) teardownBefore(node string, at time.Time) (TeardownRecord, bool) {
	var best TeardownRecord
	ok := false
	for _, td := range r.Teardowns {
		if td.Node == node && td.Start.Before(at) && (!ok || td.Start.After(best.Start)) {
			best, ok = td, true
		}
	}
	return best, ok
}

// drainAfter is the first drain of td's node after td started (a drain
// stamp to the second may read up to 1 s before the teardown's start).
func (r Record) drainAfter(td TeardownRecord) (DrainRecord, bool) {
	var best DrainRecord
	ok := false
	for _, d := range r.Drains {
		if d.Node == td.Node && !d.At.Before(td.Start) && (!ok || d.At.Before(best.At)) {
			best, ok = d, true
		}
	}
	return best, ok
}

func quantile(xs []time.Duration, q float64) time.Duration {
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func rel(begin, t time.Time) time.Duration { return t.Sub(begin).Round(100 * time.Millisecond) }
