package aggregator

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/gracewatch/gracewatch/aggregator/intake"
	"github.com/gracewatch/gracewatch/aggregator/nodelog"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/nodename"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// ErrNotGone is Forget's error for a node whose agent is a live member.
var ErrNotGone = errors.New("node not gone")

// forgetter is the optional part of a Mesh that forgets gone members
// (mesh.Mesh has it).
type forgetter interface {
	Forget(name string) bool
}

// Forget removes a node whose agent is dead or has left the mesh (a node
// decommissioned or renamed) from this aggregator's view, and asks the
// other aggregators to do the same. Watchers get a "forget" event. If the
// node's agent comes back, it is a new node. Errors: nodename.ErrInvalid
// (wrapped), ErrUnknownNode,
// ErrNotGone (the agent is alive: nothing to forget), ErrNotRunning, or
// ctx's error. Safe for concurrent use; it blocks until the loop has done
// it.
func (s *Service) Forget(ctx context.Context, name, by string) error {
	if err := nodename.Validate(name); err != nil {
		return err
	}
	s.mu.RLock()
	running := s.running
	s.mu.RUnlock()
	if !running {
		return ErrNotRunning
	}
	reply := make(chan error, 1)
	s.enqueue(input{kind: inForget, from: by, forget: name, reply: reply})
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// forget runs on the loop: it removes name if its member is gone and, when
// propagate is set, tells the other aggregators.
func (s *Service) forget(name, by string, propagate bool) error {
	in, ok := s.inputs[name]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownNode, name)
	}
	if !view.Gone(in.Status) {
		st := in.Status
		if st == "" {
			st = mesh.StatusAlive
		}
		return fmt.Errorf("%w: %s is a %s member of the mesh; only a dead or departed node can be forgotten", ErrNotGone, name, st)
	}
	delete(s.inputs, name)
	s.strangers.Seen(name) // no longer adopted or unseen
	delete(s.enforce, name)
	delete(s.held, name)
	s.probes.Forget(name)
	s.reach.Forget(name)
	s.mu.Lock()
	prev := s.view[name]
	s.modes.Move(prev.Mode, "")
	delete(s.view, name)
	s.inc.Untrack(name)
	if i, found := slices.BinarySearch(s.names, name); found {
		s.names = slices.Delete(s.names, i, i+1)
	}
	s.publishForgetLocked(name)
	s.mu.Unlock()
	if f, ok := s.mesh.(forgetter); ok {
		f.Forget(name)
	}
	s.act.Forget(name)
	if s.plan != nil {
		s.plan.Forget(name)
	}
	s.log.Info("node forgotten", "node", name, "by", by, "was", prev.State, "reason", nodelog.Text(prev.Reason))
	if propagate {
		var to []string
		for agg, m := range s.aggs {
			if m.Status == mesh.StatusAlive {
				to = append(to, agg)
			}
		}
		env := &gwpb.Envelope{Body: &gwpb.Envelope_Forget{Forget: &gwpb.Forget{Names: []string{name}, By: by}}}
		s.sendToAggregators(to, env, "forget not delivered to an aggregator; forget the node there too", "", "node", name)
	}
	return nil
}

// applyForget applies another aggregator's Forget: the nodes that are gone
// here too are forgotten; one that is alive here is kept (this aggregator
// sees its agent).
func (s *Service) applyForget(from string, f *gwpb.Forget) {
	names := f.GetNames()
	if len(names) > intake.MaxForgetNames {
		s.log.Warn("forget over its bound: only the first names are applied", "from", nodename.Quote(from), "names", len(names),
			"max", intake.MaxForgetNames)
		names = names[:intake.MaxForgetNames]
	}
	for _, name := range names {
		if s.refuseName(name, "forget", from) {
			continue
		}
		if err := s.forget(name, fmt.Sprintf("%s (from %s)", nodelog.Text(f.GetBy()), from), false); err != nil {
			s.log.Info("forget from another aggregator not applied", "from", from, "node", name, "err", err)
		}
	}
}
