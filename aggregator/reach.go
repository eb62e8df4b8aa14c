package aggregator

// Where the nodes are reached (package aggregator/reach keeps it across a
// crash): the proven address of a node's update handed to the mesh and the
// book, and the nodes of the book asked at the start.

import (
	"maps"
	"slices"

	"github.com/gracewatch/gracewatch/aggregator/probe"
	"github.com/gracewatch/gracewatch/internal/nodename"
)

// addrProver is the part of the mesh that records where a node proved it
// is reached (*mesh.Mesh; mesh/reach.go).
type addrProver interface {
	SetProvenAddr(node, addr string) error
}

// prover is the Service's mesh as an addrProver, if it is one.
func (s *Service) prover() (addrProver, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.mesh.(addrProver)
	return p, ok
}

// provenAddr hands the mesh the address a node named in its newest proven
// StateUpdate, so that the probes that decide whether it is gone, and every
// control, go there and not to an address gossip alone gave (one forged
// alive message moved it), and keeps it for a restart. Only under node
// restriction: without it no word of a node is proven, and its claim is
// worth no more than gossip's. An address that cannot be dialled is logged,
// at most once per node and staleLogEvery. It runs on the loop.
func (s *Service) provenAddr(node, addr string) {
	p, ok := s.prover()
	if !ok || !s.opts.ProvenOnly || addr == "" {
		return
	}
	if err := p.SetProvenAddr(node, addr); err != nil {
		if ok, suppressed := s.staleLog.Allow("addr:"+node, s.clock.Now()); ok {
			s.log.Warn("a node's own address refused: it is reached at the address gossip gives", "node", nodename.Quote(node),
				"err", err, "suppressed", suppressed)
		}
		return
	}
	s.reach.Set(node, addr)
}

// askSaved asks every node of the book read at the start for its state, at
// the address it had proved, once: the start of a restarted aggregator
// (package aggregator/reach). It runs on the loop, when Run has the mesh.
func (s *Service) askSaved() {
	loaded := s.reach.TakeLoaded()
	if len(loaded) == 0 || !s.opts.ProvenOnly {
		return
	}
	p, ok := s.prover()
	if !ok {
		return
	}
	now := s.clock.Now()
	asked := 0
	for _, name := range slices.Sorted(maps.Keys(loaded)) {
		if _, known := s.inputs[name]; known {
			continue // it spoke already
		}
		if err := p.SetProvenAddr(name, loaded[name]); err != nil {
			continue
		}
		s.startProbe(name, probe.Restart, now)
		asked++
	}
	s.log.Info("asked the nodes of the last run for their state", "nodes", asked, "file", s.reach.Path())
}
