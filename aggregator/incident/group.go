package incident

import (
	"maps"
	"slices"
	"time"
)

// State is what Group remembers from one call to the next. The zero State
// has no incident. Group never modifies the State it is given: the maps
// and slices of an earlier State stay as they were.
type State struct {
	// NextID is the id of the last incident opened.
	NextID uint64
	// Open are the open incidents by id; Member the open incident of each
	// node in one, and Since the Round it joined it in.
	Open   map[uint64]Incident
	Member map[string]uint64
	Since  map[string]uint64
	// Round counts the calls of Group: it orders joins and departures
	// (Since, Departure.Round) where times cannot, several calls being
	// made at the same time.
	Round uint64
	// Closed are the last MaxClosed closed incidents, oldest first.
	Closed []Incident
}

// ChangeKind is what happened to an incident.
type ChangeKind string

// Changes of an incident.
const (
	Opened  ChangeKind = "opened"
	Changed ChangeKind = "changed" // nodes joined or left
	Closed  ChangeKind = "closed"  // its last node left
)

// Change is one incident's change in one call of Group: one per incident
// however many of its nodes moved.
type Change struct {
	Kind     ChangeKind
	Incident Incident
	// Joined and Left are the nodes that joined and left it, sorted.
	Joined, Left []string
}

// Group updates prev with the nodes down at now and returns the new State
// and the changes, ordered by incident id. It is pure: the same arguments
// give the same result, and prev is not modified.
//
// The rules:
//
//  1. A node with a cause (Node.Cause.Kind set) is in exactly one open
//     incident; a node not in down, or without a cause, is in none.
//  2. A node stays in its incident while its cause keeps the incident's
//     key, and also when its cause becomes undiagnosed while it is in a
//     diagnosed incident (the agent restarted and lost its report, or the
//     report was pruned): it is still down for that cause.
//  3. A node that is in no incident joins the open incident of its key: a
//     file system's whatever its age; a windowed kind's only if a node
//     joined it within Config.Window. Otherwise it opens a new incident,
//     or past MaxOpen open ones joins the overflow incident.
//  4. An incident whose last node left closes, with its duration; the
//     last MaxClosed closed ones are kept.
//  5. Ids count up from prev.NextID + 1 and are never reused; nodes join in
//     the order of their names, so ids do not depend on the order of down.
//  6. A node that leaves a diagnosed incident because its cause cleared
//     (it is not passed, or passed without a cause, or down for another
//     diagnosed cause) is one of the incident's Gone; one that leaves
//     because it is Unreachable, or down by the view's rule without a
//     diagnosis (no report, unreachable), is not: its cause may still
//     hold it.
func Group(prev State, down []Node, now time.Time, cfg Config) (State, []Change) {
	next := State{NextID: prev.NextID, Open: maps.Clone(prev.Open), Member: maps.Clone(prev.Member),
		Since: prev.Since, Round: prev.Round + 1, Closed: prev.Closed}
	if next.Open == nil {
		next.Open = map[uint64]Incident{}
	}
	if next.Member == nil {
		next.Member = map[string]uint64{}
	}
	// Since is copied on its first change only: most calls move no node.
	sinceCopied := false
	since := func() map[string]uint64 {
		if !sinceCopied {
			next.Since, sinceCopied = maps.Clone(prev.Since), true
			if next.Since == nil {
				next.Since = map[string]uint64{}
			}
		}
		return next.Since
	}
	byName := make(map[string]*Node, len(down))
	unknown := map[string]bool{}
	names := make([]string, 0, len(down))
	for i := range down {
		n := &down[i]
		if n.Cause.Kind == "" {
			if n.Unreachable {
				unknown[n.Name] = true
			}
			continue
		}
		if byName[n.Name] != nil {
			continue
		}
		byName[n.Name] = n
		names = append(names, n.Name)
	}
	slices.Sort(names)

	joined := map[uint64][]string{}
	left := map[uint64][]string{}
	gone := map[uint64][]string{}
	opened := map[uint64]bool{}

	// Rules 1, 2 and 6: who leaves, and whose cause cleared.
	members := slices.Sorted(maps.Keys(next.Member))
	for _, name := range members {
		id := next.Member[name]
		inc := next.Open[id]
		n := byName[name]
		if n != nil && stays(inc, n) {
			continue
		}
		delete(next.Member, name)
		delete(since(), name)
		left[id] = append(left[id], name)
		if inc.Cause.Kind.Diagnosed() && (n == nil && !unknown[name] || n != nil && n.Cause.Kind.Diagnosed()) {
			gone[id] = append(gone[id], name)
		}
	}

	// Rule 3: who joins where.
	byKey := map[string]uint64{} // the open incident a newcomer of a key joins
	for _, id := range slices.Sorted(maps.Keys(next.Open)) {
		inc := next.Open[id]
		if inc.Cause.Kind.Windowed() && now.Sub(inc.LastJoin) > cfg.window() {
			continue
		}
		byKey[inc.Cause.Key()] = id // the latest of a key wins
	}
	for _, name := range names {
		if _, in := next.Member[name]; in {
			continue
		}
		n := byName[name]
		key := n.Cause.Key()
		id, ok := byKey[key]
		if !ok {
			cause := n.Cause
			if openCount(next.Open) >= MaxOpen {
				cause = Cause{Kind: KindOverflow}
				key = cause.Key()
				id, ok = byKey[key]
			}
			if !ok {
				next.NextID++
				id = next.NextID
				next.Open[id] = Incident{ID: id, Cause: cause, FirstSeen: now}
				opened[id] = true
				byKey[key] = id
			}
		}
		next.Member[name] = id
		since()[name] = next.Round
		joined[id] = append(joined[id], name)
	}

	// Aggregates of every open incident, and rule 4.
	nodesOf := map[uint64][]string{}
	for _, name := range slices.Sorted(maps.Keys(next.Member)) {
		id := next.Member[name]
		nodesOf[id] = append(nodesOf[id], name)
	}
	var changes []Change
	for _, id := range slices.Sorted(maps.Keys(next.Open)) {
		inc := next.Open[id]
		inc.Nodes = nodesOf[id]
		inc.Clean = nil
		inc.Counts = Counts{}
		keepExample := false
		var first *Node
		for _, name := range inc.Nodes {
			n := byName[name]
			inc.Counts = inc.Counts.Add(n.Counts)
			if n.Clean {
				inc.Clean = append(inc.Clean, name)
			}
			if name == inc.Example.Node && n.Example.PID != 0 {
				keepExample = true
				inc.Example = n.Example
				inc.Example.Node = name
			}
			if first == nil || (first.Example.PID == 0 && n.Example.PID != 0) {
				first = n
			}
		}
		if !keepExample && first != nil {
			inc.Example = first.Example
			inc.Example.Node = first.Name
		}
		inc.Peak = max(inc.Peak, len(inc.Nodes))
		if len(joined[id]) > 0 {
			inc.LastJoin = now
		}
		if len(joined[id]) > 0 || len(left[id]) > 0 {
			inc.LastSeen = now
		}
		if len(joined[id]) > 0 || len(gone[id]) > 0 {
			inc.Gone = departures(inc.Gone, joined[id], gone[id], next.Round)
		}
		ch := Change{Joined: joined[id], Left: left[id]}
		switch {
		case len(inc.Nodes) == 0:
			inc.Closed = now
			inc.Gone = nil
			delete(next.Open, id)
			next.Closed = append(slices.Clone(next.Closed), inc)
			if over := len(next.Closed) - MaxClosed; over > 0 {
				next.Closed = slices.Clone(next.Closed[over:])
			}
			ch.Kind = Closed
		case opened[id]:
			ch.Kind = Opened
		case len(ch.Joined) > 0 || len(ch.Left) > 0:
			ch.Kind = Changed
		}
		if inc.Open() {
			next.Open[id] = inc
		}
		if ch.Kind != "" {
			ch.Incident = inc
			changes = append(changes, ch)
		}
	}
	return next, changes
}

// departures returns prev (not modified) without the nodes that joined
// again, with the nodes gone in round appended, and cut to the latest
// MaxGone.
func departures(prev []Departure, joined, gone []string, round uint64) []Departure {
	out := make([]Departure, 0, len(prev)+len(gone))
	for _, d := range prev {
		if _, again := slices.BinarySearch(joined, d.Node); !again {
			out = append(out, d)
		}
	}
	for _, name := range gone {
		out = append(out, Departure{Node: name, Round: round})
	}
	if over := len(out) - MaxGone; over > 0 {
		out = slices.Clone(out[over:])
	}
	return out
}

// Resumable reports whether node, a member of an open incident that its
// agent verified clean, may be resumed on the incident's evidence that its
// cause was shared, external and has cleared (docs/DESIGN.md §5b): the
// incident is of a diagnosed cause (a file system or a wait channel), and
// at least min-1 other nodes (min is raised to MinResumeNodes) shared that
// cause with node and cleared since: members verified clean now, or
// departures (Incident.Gone) after node joined.
//
// Every node counted is a distinct node name, and each node speaks only
// for itself, so one compromised node adds at most one to the count
// however it flips: with min at 3, a node is never resumed on its own
// word and one other node's; at least one more, honest node must have hung
// on the same cause with it and cleared. The measure is of the nodes that
// were down for the cause while node was (it was a member all along
// since), not the incident's Peak nor the distinct nodes it ever held:
// a file-system incident stays open as long as any one node, a liar's
// included, stays down for it, so its Peak (and its past members) may
// vouch for a storm long over, not for node. The nodes cleared are
// counted rather than the nodes hung, so that one node clearing itself
// never passes for the cause clearing while the others still hang. The
// memory it needs is bounded: a Round per member, and at most MaxGone
// departures per incident, the latest (more than min-1 is never needed,
// min being at most MaxGone).
func (s State) Resumable(node string, min int) bool {
	id, ok := s.Member[node]
	if !ok {
		return false
	}
	inc := s.Open[id]
	if !inc.Cause.Kind.Diagnosed() {
		return false
	}
	if _, clean := slices.BinarySearch(inc.Clean, node); !clean {
		return false
	}
	since := s.Since[node]
	cleared := len(inc.Clean) - 1
	for _, d := range inc.Gone {
		if d.Round > since {
			cleared++
		}
	}
	return cleared >= max(min, MinResumeNodes)-1
}

// stays reports whether node n, a member of inc, stays in it (rule 2).
func stays(inc Incident, n *Node) bool {
	if n.Cause.Key() == inc.Cause.Key() {
		return true
	}
	if inc.Cause.Kind == KindOverflow {
		// It came here for want of room: it stays while it is down with
		// a cause, so that the overflow never churns.
		return true
	}
	return inc.Cause.Kind.Diagnosed() && n.Cause.Kind == KindUndiagnosed
}

// openCount is the number of open incidents that are not the overflow
// one.
func openCount(open map[uint64]Incident) int {
	n := 0
	for _, inc := range open {
		if inc.Cause.Kind != KindOverflow {
			n++
		}
	}
	return n
}

// Find returns the incident with id, open or among the closed ones kept.
func (s State) Find(id uint64) (Incident, bool) {
	if inc, ok := s.Open[id]; ok {
		return inc, true
	}
	for _, inc := range s.Closed {
		if inc.ID == id {
			return inc, true
		}
	}
	return Incident{}, false
}
