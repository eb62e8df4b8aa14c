package advisor

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/history"
)

// The scan's accumulator. Every record of the window passes through
// acc.record, so it does per record only slice indexing: the nodes, users
// and commands get dense indexes (names), each segment's string ids are
// mapped to them once (segIDs), and a record's strings are read only for
// the few that become evidence.

// maxPending bounds the teardowns kept for the recommendation's counts and
// the top lists over the recommended G (pending, 16 bytes each): past it a
// second scan counts them.
var maxPending = 1 << 20 // a variable for the tests

// names gives dense indexes to the names of one kind.
type names struct {
	idx  map[string]int32
	list []string
}

func newNames() *names { return &names{idx: map[string]int32{}} }

// of returns s's index, giving it one if new.
func (n *names) of(s string) int32 {
	i, ok := n.idx[s]
	if !ok {
		i = int32(len(n.list))
		n.idx[s] = i
		n.list = append(n.list, s)
	}
	return i
}

// segIDs maps the string ids of the segment being read to the indexes of
// names (stored +1; 0 not mapped yet).
type segIDs struct {
	m     []int32
	names *names
	// unknown: the empty string is shown as Unknown (users, commands).
	unknown bool
}

// reset forgets the mapping: a new segment.
func (s *segIDs) reset() {
	clear(s.m)
	s.m = s.m[:0]
}

// get returns the index of id of r's segment.
func (s *segIDs) get(r *history.Raw, id uint32) int32 {
	if int(id) >= len(s.m) {
		n := len(r.Strs) + 1
		if n > cap(s.m) {
			s.m = slices.Grow(s.m[:cap(s.m)], n-cap(s.m))
		}
		s.m = s.m[:n] // zeros: reset clears up to cap
	}
	if v := s.m[id]; v != 0 {
		return v - 1
	}
	str := r.Str(id)
	if s.unknown {
		str = orUnknown(str)
	}
	v := s.names.of(str)
	s.m[id] = v + 1
	return v
}

// pending is a teardown that may be long for the recommended G, or hung.
type pending struct {
	d         int64
	user, cmd int32
	outcome   history.Outcome
}

// kept is a teardown kept as evidence (the strings are the segment's,
// the job copied).
type kept struct {
	node, job, user, cmd, cause string
	d                           int64
	outcome                     history.Outcome
}

func (k *kept) evidence() *Evidence {
	return &Evidence{Node: k.node, Job: k.job, User: orUnknown(k.user), Command: orUnknown(k.cmd), Cause: k.cause,
		Duration: ms(k.d), Outcome: k.outcome.String()}
}

func keep(r *history.Raw, d int64) kept {
	return kept{node: r.Str(r.Node), job: string(r.Job), user: r.Str(r.User), cmd: r.Str(r.Command), cause: r.Str(r.Cause),
		d: d, outcome: r.Outcome}
}

// acc is the scan's accumulator.
type acc struct {
	q     Query
	out   *Advice
	cands []int64 // ms, ascending
	// Per bucket j (the number of candidates shorter than a duration):
	// counts and duration sums of every teardown, of the self-ended ones,
	// and the count of the signalled ones.
	n, self, sig []int
	sum          []int64

	nodes          *names
	keepNode       []bool
	nodeMax        []int64 // per node index; -1: none in the view
	seg            int
	nodeID, userID *segIDs
	cmdID          *segIDs

	durs     durations
	outcomes [8]int
	// counts: each node's released teardowns, by node index. rel,
	// selfEnded: each node's longest released and longest self-ended
	// teardown.
	counts         []int
	rel, selfEnded leaders
	// lb is a lower bound of the recommended G so far: the floor and the
	// MinBacking-th longest of the nodes' own longest self-ended
	// teardowns seen (it only grows).
	lb int64
	// hungTop: the MaxEvidence longest hung teardowns, longest first (the
	// earlier first among equal ones); hungN counts them all.
	hungTop []kept
	hungN   int
	running []Evidence
	// pend: the teardowns longer than lb when read (a self-ended one too:
	// G may stay below the longest of fewer than MinBacking nodes), and
	// the hung ones; nil once past maxPending.
	pend     []pending
	overflow bool
	// users, cmds count over TopG (or, without it, over InForce);
	// longUsers, longCmds over the recommended G (from pend).
	users, cmds, longUsers, longCmds *tops
}

func newAcc(q Query, cs []time.Duration, out *Advice) *acc {
	a := &acc{q: q, out: out, nodes: newNames(), seg: -1}
	for _, c := range cs {
		a.cands = append(a.cands, c.Milliseconds())
	}
	k := len(cs) + 1
	a.n, a.self, a.sig, a.sum = make([]int, k), make([]int, k), make([]int, k), make([]int64, k)
	un, cn := newNames(), newNames()
	a.nodeID, a.userID, a.cmdID = &segIDs{names: a.nodes}, &segIDs{names: un, unknown: true}, &segIDs{names: cn, unknown: true}
	a.users, a.cmds, a.longUsers, a.longCmds = &tops{names: un}, &tops{names: cn}, &tops{names: un}, &tops{names: cn}
	if out.FloorKnown {
		a.lb = out.Floor.Ms
	}
	return a
}

func (a *acc) bucket(d int64) int {
	j, _ := slices.BinarySearch(a.cands, d) // first candidate ≥ d: those before it are < d
	return j
}

// nodeIndex grows the per-node slices to hold node index i.
func (a *acc) nodeIndex(i int32) {
	for int(i) >= len(a.keepNode) {
		name := a.nodes.list[len(a.keepNode)]
		a.keepNode = append(a.keepNode, a.q.Nodes == nil || a.q.Nodes(name))
		a.nodeMax = append(a.nodeMax, -1)
		a.counts = append(a.counts, 0)
	}
}

func (a *acc) add(node int32, d int64, o history.Outcome, running bool) {
	a.nodeIndex(node)
	j := a.bucket(d)
	a.n[j]++
	a.sum[j] = satAdd(a.sum[j], d)
	switch {
	case running:
	case o.SelfEnded():
		a.self[j]++
	case o.Signalled():
		a.sig[j]++
	}
	a.nodeMax[node] = max(a.nodeMax[node], d)
}

func (a *acc) nodesSeen() int {
	n := 0
	for _, m := range a.nodeMax {
		if m >= 0 {
			n++
		}
	}
	return n
}

// record takes one record of the scan (a Source's callback).
func (a *acc) record(r *history.Raw) bool {
	if r.Seg != a.seg {
		a.seg = r.Seg
		a.nodeID.reset()
		a.userID.reset()
		a.cmdID.reset()
	}
	node := a.nodeID.get(r, r.Node)
	a.nodeIndex(node)
	if !a.keepNode[node] {
		return true
	}
	d := min(max(r.DurationMs, 0), history.MaxDurationMs) // the intake's bound (older files may hold more)
	if d > a.nodeMax[node] {
		a.rel.raise(node, d, r) // its new longest (nodeMax holds released ones only until the scan ends)
	}
	a.add(node, d, r.Outcome, false)
	a.durs.add(uint32(d))
	a.counts[node]++
	a.outcomes[r.Outcome%8]++
	self, hung := r.Outcome.SelfEnded(), r.Outcome == history.OutcomeHung
	if self && a.selfEnded.offer(node, d, r) {
		if b := a.selfEnded.kth(MinBacking); b != nil {
			a.lb = max(a.lb, b.d)
		}
	}
	if hung {
		a.hungN++
		if len(a.hungTop) < MaxEvidence || d > a.hungTop[len(a.hungTop)-1].d {
			i, _ := slices.BinarySearchFunc(a.hungTop, d, func(k kept, d int64) int { return cmp.Compare(d, k.d) }) // longest first
			for i < len(a.hungTop) && a.hungTop[i].d == d {
				i++
			}
			a.hungTop = slices.Insert(a.hungTop, i, keep(r, d))
			a.hungTop = a.hungTop[:min(len(a.hungTop), MaxEvidence)]
		}
	}
	if topG := a.topG(); d > topG || hung {
		a.users.add(a.userID.get(r, r.User), d > topG, hung)
		a.cmds.add(a.cmdID.get(r, r.Command), d > topG, hung)
	}
	if (d > a.lb || hung) && !a.overflow {
		if len(a.pend) >= maxPending {
			a.pend, a.overflow = nil, true
		} else {
			a.pend = append(a.pend, pending{d: d, user: a.userID.get(r, r.User), cmd: a.cmdID.get(r, r.Command), outcome: r.Outcome})
		}
	}
	return true
}

// thin reads the window again and keeps as the durations only those that
// count (c.thinner: of a node over the cap, its share spread evenly). To
// thin in the first scan's durations would take each one's node, 4 bytes
// more a teardown; a second scan costs only the answers that have a node
// over the cap (twice the median node's records), which an honest
// cluster's nodes, sending like numbers, do not.
func (a *acc) thin(src Source, c *counting) error {
	a.durs = durations{}
	th := c.thinner()
	seg := -1
	err := src(a.q.FromMs, a.q.ToMs, func(r *history.Raw) bool {
		if r.Seg != seg {
			seg = r.Seg
			a.nodeID.reset()
		}
		node := a.nodeID.get(r, r.Node)
		a.nodeIndex(node)
		if a.keepNode[node] && th.counts(node) {
			a.durs.add(uint32(min(max(r.DurationMs, 0), history.MaxDurationMs)))
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("advisor: %w", err)
	}
	return nil
}

// topG is the G the scan's top lists count over: TopG, else InForce.
func (a *acc) topG() int64 {
	if a.q.TopG > 0 {
		return a.q.TopG.Milliseconds()
	}
	return a.q.InForce.Milliseconds()
}

// recommend fills out.Recommendation, or out.Thin with why not, and the
// top lists over the recommended G.
func (a *acc) recommend(out *Advice, src Source) error {
	counted := out.Durations.Count
	driver := a.selfEnded.kth(MinBacking)
	switch {
	case out.Records == 0:
		out.Thin = "no released teardowns in the window for these nodes"
		return nil
	case counted < MinRecords && counted < out.Records:
		out.Thin = fmt.Sprintf("too thin: %d released teardowns in the window count (at most %d of a node), the advisor recommends from %d",
			counted, out.Durations.NodeCap, MinRecords)
		return nil
	case counted < MinRecords:
		out.Thin = fmt.Sprintf("too thin: %d released teardowns in the window, the advisor recommends from %d", out.Records, MinRecords)
		return nil
	case len(a.selfEnded.top) == 0:
		out.Thin = "no teardown in the window ended by itself (every one was signalled or unreported): nothing bounds G from below"
		return nil
	case driver == nil:
		e := a.selfEnded.top[0].ev
		out.Thin = fmt.Sprintf("only one node's teardowns ended by themselves (%s, the longest %v): the advisor follows a value at least %d nodes reached",
			e.node, ms(e.d), MinBacking)
		return nil
	}
	g, why := driver.d, DriverSelfEnded
	if out.FloorKnown && out.Floor.Ms > g {
		g, why = out.Floor.Ms, DriverFloor
	}
	g = wholeSecond(g) // at or above both (each within the intake's bounds)
	r := &Recommendation{G: ms(g), Driver: why, LongestSelfEnded: driver.ev.evidence(), Unbacked: a.selfEnded.above(driver.d)}
	r.SelfEndedBacking, r.SelfEndedNodes = a.selfEnded.reaching(driver.d)
	// Every teardown longer than g, and every hung one, is in pend (g is
	// at least lb was when it was read), unless pend overflowed: then a
	// second scan counts them.
	hungLong := 0
	count := func(d int64, o history.Outcome, user, cmd int32) {
		long, hung := d > g, o == history.OutcomeHung
		switch {
		case !long:
		case hung:
			hungLong++
		case o == history.OutcomeTerminated || o == history.OutcomeKilled:
			r.Signalled++
		case o == history.OutcomeUnreported:
			r.Unreported++
		case o.SelfEnded():
			r.FalseDrains++
		}
		if long || hung {
			a.longUsers.add(user, long, hung)
			a.longCmds.add(cmd, long, hung)
		}
	}
	if !a.overflow {
		for _, p := range a.pend {
			count(p.d, p.outcome, p.user, p.cmd)
		}
	} else {
		seg := -1
		err := src(a.q.FromMs, a.q.ToMs, func(rr *history.Raw) bool {
			if rr.Seg != seg {
				seg = rr.Seg
				a.nodeID.reset()
				a.userID.reset()
				a.cmdID.reset()
			}
			node := a.nodeID.get(rr, rr.Node)
			a.nodeIndex(node)
			d := min(max(rr.DurationMs, 0), history.MaxDurationMs)
			if a.keepNode[node] && (d > g || rr.Outcome == history.OutcomeHung) {
				count(d, rr.Outcome, a.userID.get(rr, rr.User), a.cmdID.get(rr, rr.Command))
			}
			return true
		})
		if err != nil {
			return fmt.Errorf("advisor: %w", err)
		}
	}
	r.Caught = hungLong
	r.Missed = a.hungN - hungLong
	for _, k := range a.hungTop {
		if k.d > g {
			r.CaughtExamples = append(r.CaughtExamples, *k.evidence())
		}
	}
	for _, e := range a.running {
		if e.Duration.Milliseconds() > g {
			r.Caught++
			r.CaughtExamples = append(r.CaughtExamples, e)
		}
	}
	slices.SortStableFunc(r.CaughtExamples, func(x, y Evidence) int { return cmp.Compare(y.Duration, x.Duration) })
	r.CaughtExamples = r.CaughtExamples[:min(len(r.CaughtExamples), MaxEvidence)]
	out.Recommendation = r
	return nil
}

// tops counts long and hung teardowns by name index.
type tops struct {
	names      *names
	long, hung []int
}

func (t *tops) add(i int32, long, hung bool) {
	for int(i) >= len(t.long) {
		t.long, t.hung = append(t.long, 0), append(t.hung, 0)
	}
	if long {
		t.long[i]++
	}
	if hung {
		t.hung[i]++
	}
}

// top returns the n names with the most long (then hung) teardowns.
func (t *tops) top(n int) []Top {
	out := []Top{}
	for i := range t.long {
		if t.long[i]+t.hung[i] > 0 {
			out = append(out, Top{Name: t.names.list[i], Long: t.long[i], Hung: t.hung[i]})
		}
	}
	slices.SortFunc(out, topOrder)
	return out[:min(len(out), n)]
}

// topOrder sorts the top lists: most long and hung, then most hung, then
// by name.
func topOrder(a, b Top) int {
	if c := cmp.Compare(b.Long+b.Hung, a.Long+a.Hung); c != 0 {
		return c
	}
	if c := cmp.Compare(b.Hung, a.Hung); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}
