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
	// node in one.
	Open   map[uint64]Incident
	Member map[string]uint64
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
func Group(prev State, down []Node, now time.Time, cfg Config) (State, []Change) {
	next := State{NextID: prev.NextID, Open: maps.Clone(prev.Open), Member: maps.Clone(prev.Member), Closed: prev.Closed}
	if next.Open == nil {
		next.Open = map[uint64]Incident{}
	}
	if next.Member == nil {
		next.Member = map[string]uint64{}
	}
	byName := make(map[string]*Node, len(down))
	names := make([]string, 0, len(down))
	for i := range down {
		n := &down[i]
		if n.Cause.Kind == "" || byName[n.Name] != nil {
			continue
		}
		byName[n.Name] = n
		names = append(names, n.Name)
	}
	slices.Sort(names)

	joined := map[uint64][]string{}
	left := map[uint64][]string{}
	opened := map[uint64]bool{}

	// Rules 1 and 2: who leaves.
	members := slices.Sorted(maps.Keys(next.Member))
	for _, name := range members {
		id := next.Member[name]
		inc := next.Open[id]
		n := byName[name]
		if n != nil && stays(inc, n) {
			continue
		}
		delete(next.Member, name)
		left[id] = append(left[id], name)
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
		ch := Change{Joined: joined[id], Left: left[id]}
		switch {
		case len(inc.Nodes) == 0:
			inc.Closed = now
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
