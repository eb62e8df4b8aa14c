package reservation

import (
	"slices"
	"strings"
	"time"
)

// Reservation is a hold in the scheduler that gracewatch owns: Nodes held
// from now until End.
type Reservation struct {
	// Name begins with Config.Prefix.
	Name string
	// Nodes are sorted and unique.
	Nodes []string
	// End is in whole seconds.
	End time.Time
}

// Node is what the plan needs of a node of the view.
type Node struct {
	Name string
	// Tearing: the node is served teardown.
	Tearing bool
	// Since is when it entered teardown (zero: unknown, counted as long
	// ago); FreeAt is its free_at.
	Since, FreeAt time.Time
}

// hints are what earlier rounds learned from the scheduler's refusals.
type hints struct {
	// maxGroup: a create holding the node failed; it is put only in
	// reservations of at most this many nodes (halved at each failure, so
	// that a node the scheduler refuses is found in log2(n) rounds).
	maxGroup map[string]int
	// quarantine: a create of the node alone failed; it is not reserved
	// until then.
	quarantine map[string]time.Time
	// failures counts the node's failed creates alone (the quarantine's
	// back-off).
	failures map[string]int
	// noJoin: an update that added the node failed; it goes only into a
	// reservation created for it.
	noJoin map[string]bool
}

func newHints() hints {
	return hints{maxGroup: map[string]int{}, quarantine: map[string]time.Time{}, failures: map[string]int{}, noJoin: map[string]bool{}}
}

// prune forgets the hints of nodes that are not tearing down any more.
func (h hints) prune(nodes map[string]Node) {
	for _, m := range []map[string]int{h.maxGroup, h.failures} {
		for name := range m {
			if !nodes[name].Tearing {
				delete(m, name)
			}
		}
	}
	for name := range h.quarantine {
		if !nodes[name].Tearing {
			delete(h.quarantine, name)
		}
	}
	for name := range h.noJoin {
		if !nodes[name].Tearing {
			delete(h.noJoin, name)
		}
	}
}

// span is where a reservation holding a node may end: from lo to hi (both
// included); target is where one made for it ends.
type span struct{ lo, hi, target time.Time }

// fits reports whether a reservation ending at end suits the node.
func (s span) fits(end time.Time) bool { return !end.Before(s.lo) && !end.After(s.hi) }

// spanOf is a node's span: it must be held at least until its free_at and
// at most Window longer. A free_at past now + MaxDuration is held until
// then only, and held again further once less than half of it is left.
func spanOf(n Node, now time.Time, r rules) span {
	f := ceilSecond(n.FreeAt)
	if limit := ceilSecond(now.Add(r.maxDuration)); f.After(limit) {
		return span{lo: now.Add(r.maxDuration / 2), hi: f.Add(r.window), target: limit}
	}
	return span{lo: f, hi: f.Add(r.window), target: f}
}

// ceilSecond rounds t up to a whole second.
func ceilSecond(t time.Time) time.Time {
	s := t.Truncate(time.Second)
	if s.Before(t) {
		s = s.Add(time.Second)
	}
	return s
}

// eligible reports whether a node should be held at now: it is tearing
// down and, unless it is held already, it has been so for After and its
// free_at is at least MinLeft ahead. A held node stays so while it tears
// down (past its free_at its reservation ends by itself, and the node
// goes up or down).
func eligible(n Node, now time.Time, r rules, held bool) bool {
	if !n.Tearing || n.FreeAt.IsZero() {
		return false
	}
	if held {
		return true
	}
	if !n.Since.IsZero() && now.Before(n.Since.Add(r.after)) {
		return false
	}
	return n.FreeAt.Sub(now) >= r.minLeft
}

// planInput is what plan decides from.
type planInput struct {
	now   time.Time
	rules rules
	nodes map[string]Node
	// have are the reservations the scheduler holds (those that have ended
	// are ignored: the scheduler purges them).
	have    []Reservation
	hints   hints
	newName func() string
}

// group is a reservation being planned.
type group struct {
	name  string
	end   time.Time
	nodes []string
	// lo and hi bound where the group may end for all its nodes; limit
	// is the most nodes it may hold.
	lo, hi time.Time
	limit  int
}

func (g *group) add(node string, s span, limit int) {
	g.nodes = append(g.nodes, node)
	if len(g.nodes) == 1 || s.lo.After(g.lo) {
		g.lo = s.lo
	}
	if len(g.nodes) == 1 || s.hi.Before(g.hi) {
		g.hi = s.hi
	}
	g.limit = min(g.limit, limit)
}

// plan returns the reservations the scheduler should hold at in.now, and
// the earliest later time at which that changes by time alone (zero:
// never). It is pure.
//
// The rules, in order:
//  1. An eligible node that a reservation holds stays in it while the
//     reservation suits it (ends within its span); a node held by two
//     keeps the first by name.
//  2. Another eligible node joins the reservation that suits it and ends
//     first, else one whose end can move to the node's target while still
//     suiting every node it holds; not past MaxNodes, not after an update
//     that added it failed.
//  3. The nodes left, by target, form new reservations: each holds the
//     nodes whose targets lie within Window of its first's, ending at the
//     latest target, with at most as many nodes as its members' limits
//     allow (a failed create halves them).
//  4. A reservation that holds no node is gone, unless a new one takes its
//     name (an update instead of a delete and a create), which one holding
//     a node whose joining update failed does not.
func plan(in planInput) ([]Reservation, time.Time) {
	now, r, h := in.now, in.rules, in.hints
	var wake time.Time
	wakeAt := func(t time.Time) {
		if t.After(now) && (wake.IsZero() || t.Before(wake)) {
			wake = t
		}
	}

	have := make([]Reservation, 0, len(in.have))
	for _, res := range in.have {
		if res.End.After(now) {
			have = append(have, res)
			wakeAt(res.End)
		}
	}
	slices.SortFunc(have, func(a, b Reservation) int { return strings.Compare(a.Name, b.Name) })
	owner := map[string]string{}
	for _, res := range have {
		for _, n := range res.Nodes {
			if _, ok := owner[n]; !ok {
				owner[n] = res.Name
			}
		}
	}

	spans := map[string]span{}
	for name, n := range in.nodes {
		_, held := owner[name]
		if q, ok := h.quarantine[name]; ok && now.Before(q) && !held {
			wakeAt(q)
			continue
		}
		if !eligible(n, now, r, held) {
			if n.Tearing && !n.Since.IsZero() {
				wakeAt(n.Since.Add(r.after))
			}
			continue
		}
		spans[name] = spanOf(n, now, r)
	}

	// Rule 1.
	var groups []*group
	var spare []string
	placed := map[string]bool{}
	for _, res := range have {
		g := &group{name: res.Name, end: res.End, limit: MaxNodes}
		for _, n := range res.Nodes {
			s, ok := spans[n]
			if !ok || owner[n] != res.Name || placed[n] || !s.fits(res.End) {
				continue
			}
			g.add(n, s, MaxNodes)
			placed[n] = true
			// A node held short of a far free_at is held further once
			// less than half of MaxDuration is left.
			wakeAt(res.End.Add(-r.maxDuration / 2))
		}
		if len(g.nodes) > 0 {
			groups = append(groups, g)
		} else {
			spare = append(spare, res.Name)
		}
	}

	var rest []string
	for n := range spans {
		if !placed[n] {
			rest = append(rest, n)
		}
	}
	byTarget := func(a, b string) int {
		if c := spans[a].target.Compare(spans[b].target); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	}
	slices.SortFunc(rest, byTarget)

	// Rule 2.
	existing := len(groups)
	var left []string
	limitOf := func(n string) int {
		if m, ok := h.maxGroup[n]; ok {
			return max(1, min(m, MaxNodes))
		}
		return MaxNodes
	}
	for _, n := range rest {
		if h.noJoin[n] || !join(groups[:existing], n, spans[n], limitOf(n)) {
			left = append(left, n)
		}
	}

	// Rule 3.
	var cur *group
	var created []*group
	for _, n := range left {
		s, limit := spans[n], limitOf(n)
		if cur != nil && !s.target.After(cur.hi) && len(cur.nodes) < min(cur.limit, limit) {
			cur.add(n, s, limit)
			cur.end = s.target
			continue
		}
		cur = &group{end: s.target, limit: limit}
		cur.add(n, s, limit)
		created = append(created, cur)
	}
	// A new reservation takes the name of one that lost all its nodes:
	// one update instead of a delete and a create (a node whose free_at
	// moved past its reservation's). Not one that holds a node whose
	// joining update failed: that update would fail again, and the nodes
	// the old reservation must give back would stay held with it.
	for _, g := range created {
		if len(spare) > 0 && !slices.ContainsFunc(g.nodes, func(n string) bool { return h.noJoin[n] }) {
			g.name, spare = spare[0], spare[1:]
		} else {
			g.name = in.newName()
		}
		groups = append(groups, g)
	}

	out := make([]Reservation, 0, len(groups))
	for _, g := range groups {
		slices.Sort(g.nodes)
		out = append(out, Reservation{Name: g.name, Nodes: g.nodes, End: g.end})
	}
	slices.SortFunc(out, func(a, b Reservation) int { return strings.Compare(a.Name, b.Name) })
	return out, wake
}

// join puts node into the group that suits it and ends first, else into
// the one whose end can move to the node's target for every node it
// holds, moving it; it reports whether it did. A group joined holds fewer
// nodes than its own limit and the node's.
func join(groups []*group, node string, s span, limit int) bool {
	var best *group
	for _, g := range groups {
		if len(g.nodes) < min(g.limit, limit) && s.fits(g.end) && (best == nil || g.end.Before(best.end)) {
			best = g
		}
	}
	if best != nil {
		best.add(node, s, MaxNodes)
		return true
	}
	for _, g := range groups {
		end := s.target
		if len(g.nodes) < min(g.limit, limit) && !end.Before(g.lo) && !end.After(g.hi) && s.fits(end) &&
			(best == nil || end.Before(best.end)) {
			best = g
		}
	}
	if best != nil {
		best.add(node, s, MaxNodes)
		best.end = s.target
		return true
	}
	return false
}

// verb is what a command does.
type verb string

// The command's verbs.
const (
	verbList   verb = "list"
	verbCreate verb = "create"
	verbUpdate verb = "update"
	verbDelete verb = "delete"
)

// op is one command of a round.
type op struct {
	verb verb
	res  Reservation
	// added are the nodes an update adds.
	added []string
}

// diff returns the commands that turn have into want: deletes first (they
// give nodes back), then updates, then creates. Reservations of have that
// have ended are the scheduler's to purge.
func diff(now time.Time, have, want []Reservation) []op {
	haveBy := map[string]Reservation{}
	for _, r := range have {
		if r.End.After(now) {
			haveBy[r.Name] = r
		}
	}
	wantBy := map[string]bool{}
	var dels, ups, creates []op
	for _, w := range want {
		wantBy[w.Name] = true
		h, ok := haveBy[w.Name]
		switch {
		case !ok:
			creates = append(creates, op{verb: verbCreate, res: w})
		case !h.End.Equal(w.End) || !slices.Equal(h.Nodes, w.Nodes):
			var added []string
			for _, n := range w.Nodes {
				if _, found := slices.BinarySearch(h.Nodes, n); !found {
					added = append(added, n)
				}
			}
			ups = append(ups, op{verb: verbUpdate, res: w, added: added})
		}
	}
	for _, h := range have {
		if _, live := haveBy[h.Name]; live && !wantBy[h.Name] {
			dels = append(dels, op{verb: verbDelete, res: h})
		}
	}
	byName := func(a, b op) int { return strings.Compare(a.res.Name, b.res.Name) }
	slices.SortFunc(dels, byName)
	slices.SortFunc(ups, byName)
	slices.SortFunc(creates, byName)
	return append(append(dels, ups...), creates...)
}
