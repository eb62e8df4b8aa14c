package meshlink

import (
	"fmt"
	"time"

	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// The aggregators the node's state goes to: which ones (the mesh's book and
// the alive members of the role), when one is new or a new process under
// the same name (it gets the full state at once), and when gossip has lost
// one (it gets the state again directly, and the status line names it).

// restartResendEvery bounds the full sends to one aggregator that its
// changing start (a new process: AggregatorRef.Started) triggers: one
// that restarts in a loop, or its key's holder flapping the start, makes
// this node send at most once per interval. A change it held back is sent
// at the next meta of that aggregator or by recheck.
const restartResendEvery = time.Second

// MemberChanged implements mesh.Handler: a newly seen aggregator gets the
// full state at once instead of waiting for the next change, and so does
// one whose proven meta names a new start (a new process under the same
// name: restarted after a crash or a kill -9, which memberlist may never
// have seen die, and which has none of the states sent to the one before).
// Only those: an aggregator's meta changes every few minutes (it signs it
// again), and every node sending its state then would be a storm.
func (l *Link) MemberChanged(m mesh.Member) {
	alive := m.Role == gwpb.Role_ROLE_AGGREGATOR && m.Status == mesh.StatusAlive
	var started int64
	if alive && m.Proven {
		started = m.Meta.GetStartedMs() // only a proven start counts
	}
	l.mu.Lock()
	was := l.aggregators[m.Name]
	switch {
	case alive && !was:
		if l.aggregators == nil {
			l.aggregators = map[string]bool{}
		}
		l.aggregators[m.Name] = true
	case !alive && was:
		delete(l.aggregators, m.Name)
	}
	restarted := l.restartedLocked(m.Name, started, was)
	sender := l.sender
	l.mu.Unlock()
	if alive && !was {
		l.kick()
	}
	if restarted && sender != nil {
		l.log.Info("aggregator restarted: sending it the full state", "aggregator", m.Name, "started", time.UnixMilli(started).UTC().Format(time.RFC3339Nano))
		sender.resend(m.Name)
	}
}

// restartedLocked records started (0: none known) as the start of
// aggregator name, and reports whether it is a new process to resend the
// full state to: the start changed since the one recorded while the state
// went to it (known), and no restart made it resend in the last
// restartResendEvery (then the change stays unrecorded, for the next
// call). l.mu is held.
func (l *Link) restartedLocked(name string, started int64, known bool) bool {
	if started == 0 {
		return false
	}
	if l.aggStarts == nil {
		l.aggStarts, l.aggResent = map[string]int64{}, map[string]time.Time{}
	}
	prev, had := l.aggStarts[name]
	if !known || !had || prev == 0 {
		// First sight (the full send of a new aggregator covers it),
		// or the first proven start of one.
		l.aggStarts[name] = started
		return false
	}
	if prev == started {
		return false
	}
	now := l.now()
	if last, ok := l.aggResent[name]; ok && now.Sub(last) < restartResendEvery && !now.Before(last) {
		return false
	}
	l.aggStarts[name], l.aggResent[name] = started, now
	return true
}

// targets are the aggregators the state goes to: those of the mesh's book
// (from their signed metas, whatever memberlist says of their liveness),
// and the alive members with the aggregator role that it does not hold (an
// aggregator without keys, where unsigned ones are accepted).
func (l *running) targets() []string {
	var names []string
	seen := map[string]bool{}
	for _, a := range l.m.Aggregators() {
		names = append(names, a.Name)
		seen[a.Name] = true
	}
	for _, name := range l.m.AliveMembers(gwpb.Role_ROLE_AGGREGATOR) {
		if !seen[name] {
			names = append(names, name)
		}
	}
	return names
}

// recheck delivers the state again to each aggregator that gossip has
// lost, and to each whose book entry names a new start that MemberChanged
// held back (restartResendEvery), and keeps the list of the lost ones for
// the status line.
func (l *running) recheck() {
	now := l.now()
	var lost []string
	for _, a := range l.m.Aggregators() {
		var started int64
		if !a.Started.IsZero() {
			started = a.Started.UnixMilli()
		}
		l.mu.Lock()
		restarted := l.restartedLocked(a.Name, started, true)
		l.mu.Unlock()
		if a.Lost(now) || restarted {
			l.sender.resend(a.Name)
		}
		if a.Lost(now) {
			lost = append(lost, a.Name)
		}
	}
	l.mu.Lock()
	changed := fmt.Sprint(lost) != fmt.Sprint(l.lost)
	l.lost = lost
	st := l.latest
	l.mu.Unlock()
	if changed && st != nil && l.notify != nil {
		l.notify(*st, l.StatusNote())
	}
}

// StatusNote says, for the service's status line, which aggregators gossip
// has lost and are reached directly; empty when none.
func (l *Link) StatusNote() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lost) == 0 {
		return ""
	}
	return fmt.Sprintf("aggregators lost by gossip, reached directly: %v", l.lost)
}
