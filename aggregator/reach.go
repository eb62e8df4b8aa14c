package aggregator

// Where the nodes are reached, remembered across a crash.
//
// Each agent names its own mesh address in its signed updates, and the
// aggregator reaches the node there, not where gossip alone says
// (mesh/reach.go). It also keeps those addresses under state_dir (the file
// "reach": one "name address" line per node, rewritten at most every
// reachSaveEvery). An aggregator that starts after a crash (no signed
// leave: the agents may not see that it is a new process until they probe
// it, a probe round of their member table, and with a table full of
// invented members that is hours) asks every node of that file at once,
// at its proven address, with the same signed probe that asks before it
// accuses (probe.go): each agent answers with its whole state, and with
// node restriction every node is served again within a few round trips,
// whatever memberlist's tables hold. A node that does not answer is not
// accused for it: it enters the view when it speaks, as before.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gracewatch/gracewatch/internal/fsutil"
	"github.com/gracewatch/gracewatch/internal/nodename"
)

const (
	// reachFileName is the file under state_dir.
	reachFileName = "reach"
	// reachSaveEvery spaces the rewrites of the file (a few hundred KB at
	// 10,000 nodes, rewritten only when a node is new or moved): a node
	// that is new or moved within it before a crash is not asked at once
	// (it is heard when it speaks, or when its agent sees the new
	// process).
	reachSaveEvery = 2 * time.Second
	// maxReachNodes bounds the nodes kept (as mesh/reach.go does).
	maxReachNodes = 1 << 16
	// maxReachFileBytes bounds what is read of the file: maxReachNodes
	// lines of a maximal name and address.
	maxReachFileBytes = maxReachNodes * (253 + 1 + 47 + 1)
	// probeRestart is the probes' why (gracewatch_aggregator_probes_total)
	// of the nodes asked at the start.
	probeRestart = "restart"
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

// reachBook is the nodes' proven addresses as the file keeps them.
type reachBook struct {
	path string // "" without state_dir

	mu      sync.Mutex
	addrs   map[string]string
	dirty   bool
	saving  bool // a save is armed or running
	savedAt time.Time
	// loaded are the nodes of the file at the start: to ask once Run
	// has the mesh.
	loaded map[string]string
}

// openReach reads dir's reach file (a missing one is an empty book). A
// line that is not a node name and an address is skipped, and counted in
// the returned error (logged by the caller; the rest is used).
func openReach(dir string) (*reachBook, error) {
	b := &reachBook{addrs: map[string]string{}, loaded: map[string]string{}}
	if dir == "" {
		return b, nil
	}
	b.path = filepath.Join(dir, reachFileName)
	f, err := os.Open(b.path)
	if errors.Is(err, os.ErrNotExist) {
		return b, nil
	}
	if err != nil {
		return b, fmt.Errorf("read %s: %w", b.path, err)
	}
	defer f.Close()
	bad, first := 0, ""
	sc := bufio.NewScanner(io.LimitReader(f, maxReachFileBytes))
	for line := 1; sc.Scan(); line++ {
		name, addr, ok := strings.Cut(sc.Text(), " ")
		err := nodename.Validate(name)
		if ok && err == nil {
			_, err = netip.ParseAddrPort(addr)
		} else if err == nil {
			err = errors.New("want a node name and an address")
		}
		if err != nil || len(b.addrs) >= maxReachNodes {
			if bad++; first == "" {
				first = fmt.Sprintf("line %d: %v", line, err)
			}
			continue
		}
		b.addrs[name] = addr
	}
	maps.Copy(b.loaded, b.addrs)
	switch {
	case sc.Err() != nil:
		return b, fmt.Errorf("read %s: %w (%d nodes read)", b.path, sc.Err(), len(b.addrs))
	case bad > 0:
		return b, fmt.Errorf("%s: %d lines skipped (%s)", b.path, bad, first)
	}
	return b, nil
}

// set records node's address; it reports whether it changed.
func (b *reachBook) set(node, addr string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.addrs[node]; ok && old == addr {
		return false
	} else if !ok && len(b.addrs) >= maxReachNodes {
		return false
	}
	b.addrs[node] = addr
	b.dirty = true
	return true
}

// forget drops node; it reports whether it was kept.
func (b *reachBook) forget(node string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.addrs[node]; !ok {
		return false
	}
	delete(b.addrs, node)
	b.dirty = true
	return true
}

// encode is the file's content, sorted by name.
func (b *reachBook) encodeLocked() []byte {
	var buf bytes.Buffer
	for _, name := range slices.Sorted(maps.Keys(b.addrs)) {
		fmt.Fprintf(&buf, "%s %s\n", name, b.addrs[name])
	}
	return buf.Bytes()
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
	if s.reach.set(node, addr) {
		s.saveReach()
	}
}

// forgetReach drops a forgotten node from the book.
func (s *Service) forgetReach(node string) {
	if s.reach.forget(node) {
		s.saveReach()
	}
}

// saveReach writes the book now, or arms a save reachSaveEvery after the
// last one. Safe for concurrent use; the write runs on a goroutine of its
// own (never on the loop).
func (s *Service) saveReach() {
	b := s.reach
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.path == "" || b.saving || !b.dirty {
		return
	}
	b.saving = true
	wait := max(b.savedAt.Add(reachSaveEvery).Sub(s.clock.Now()), 0)
	s.clock.AfterFunc(wait, func() {
		b.mu.Lock()
		data := b.encodeLocked()
		b.dirty = false
		b.mu.Unlock()
		err := fsutil.WriteFileAtomic(b.path, data, 0o600, "."+reachFileName+".*")
		b.mu.Lock()
		b.saving, b.savedAt = false, s.clock.Now()
		again := b.dirty
		if err != nil {
			b.dirty = true
		}
		b.mu.Unlock()
		if err != nil {
			if ok, _ := s.staleLog.Allow("reach:save", s.clock.Now()); ok {
				s.log.Error("cannot save where the nodes are reached: a restart asks only the nodes that speak first", "err", err)
			}
			return
		}
		if again {
			s.saveReach()
		}
	})
}

// askSaved asks every node of the book read at the start for its state, at
// the address it had proved, once: the start of a restarted aggregator
// (see the top of this file). It runs on the loop, when Run has the mesh.
func (s *Service) askSaved() {
	b := s.reach
	b.mu.Lock()
	loaded := b.loaded
	b.loaded = nil
	b.mu.Unlock()
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
		s.startProbe(name, probeRestart, now)
		asked++
	}
	s.log.Info("asked the nodes of the last run for their state", "nodes", asked, "file", b.path)
}
