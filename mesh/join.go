package mesh

// Joining: the seeds, the rejoin loop, and an aggregator's rejoin of the
// members it saw die.

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// rejoinLoop runs joinSeeds about every interval (±20 %, so that a cluster
// started at once does not beat on the seeds in step) until stop.
func (m *Mesh) rejoinLoop(every time.Duration) {
	defer close(m.loopDone)
	jitter := func() time.Duration {
		return time.Duration(float64(every) * (0.8 + 0.4*rand.Float64()))
	}
	t := time.NewTimer(jitter())
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			if len(m.seeds) > 0 {
				m.joinSeeds()
			}
			if m.role == gwpb.Role_ROLE_AGGREGATOR {
				m.rejoinDead()
			}
			t.Reset(jitter())
		}
	}
}

// Bounds of rejoinDead.
const (
	// rejoinDeadFor is how long after a member's death an aggregator
	// keeps trying to join it.
	rejoinDeadFor = 10 * time.Minute
	// rejoinDeadMax bounds the members tried per round (in parallel).
	rejoinDeadMax = 16
)

// rejoinDead tries to join, directly, the members that died here in the
// last rejoinDeadFor (at most rejoinDeadMax of them per round, at random).
// After a partition heals, a member that was cut off may still hold the
// aggregator alive: its own rejoin loop then has no missing seed, and the
// aggregator forgot it GossipToTheDeadTime after its death, so nothing
// but the next push-pull between it and some healthy member would merge
// it back (every 30 s scaled by log2(N/32)+1: 3 min at 1,000 members). A
// member that is really gone costs one failed connect per round. Only
// aggregators do this: they are few, and they are who must see the node.
func (m *Mesh) rejoinDead() {
	now := time.Now()
	var addrs []string
	m.mu.Lock()
	for name, st := range m.members {
		if name != m.name && st.Status == StatusDead && st.Addr != "" && now.Sub(st.Since) < rejoinDeadFor {
			addrs = append(addrs, st.Addr)
		}
	}
	m.mu.Unlock()
	if len(addrs) == 0 {
		return
	}
	rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	addrs = addrs[:min(len(addrs), rejoinDeadMax)]
	var wg sync.WaitGroup
	for _, addr := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if m.stopped() {
				return
			}
			if n, err := m.ml.Join([]string{addr}); n > 0 {
				m.log.Info("rejoined a member that was dead", "addr", addr)
			} else {
				m.log.Debug("dead member still unreachable", "addr", addr, "err", flatten(err))
			}
		}()
	}
	wg.Wait()
}

// joinSeeds joins one seed that is not a live member here, trying them in
// random order until one answers. One successful push-pull merges two
// partitions; seeds that are live members cost nothing, so a healthy
// cluster does not load its seeds.
func (m *Mesh) joinSeeds() {
	missing := m.missingSeeds()
	if len(missing) == 0 {
		m.joined.Store(true)
		return
	}
	rand.Shuffle(len(missing), func(i, j int) { missing[i], missing[j] = missing[j], missing[i] })
	var errs []string
	for _, seed := range missing {
		if m.stopped() {
			return
		}
		n, err := m.ml.Join([]string{seed})
		if n > 0 {
			first := !m.joined.Swap(true)
			if m.joinFailing.Swap(false) || first {
				m.log.Info("joined the mesh", "seed", seed, "members", m.ml.NumMembers())
			}
			return
		}
		errs = append(errs, flatten(err).Error())
	}
	err := strings.Join(errs, "; ")
	if !m.joinFailing.Swap(true) {
		m.log.Warn("cannot join any seed; retrying", "seeds", missing, "err", err)
	} else {
		m.log.Debug("cannot join any seed", "seeds", missing, "err", err)
	}
}

// flatten turns memberlist's multierror (a multi-line message) into one
// line.
func flatten(err error) error {
	if err == nil {
		return errors.New("no answer")
	}
	me, ok := err.(interface{ WrappedErrors() []error })
	if !ok {
		return err
	}
	msgs := make([]string, 0, len(me.WrappedErrors()))
	for _, e := range me.WrappedErrors() {
		msgs = append(msgs, e.Error())
	}
	return errors.New(strings.Join(msgs, "; "))
}

// missingSeeds returns the seeds that are neither this member nor an alive
// member here. A seed that does not resolve counts as missing (Join logs
// why).
func (m *Mesh) missingSeeds() []string {
	// The seeds' addresses first (few), then one pass over the members
	// for those alive there: every member does this every rejoin_interval,
	// and a set of every member's address each time was garbage that grew
	// with the mesh.
	addrs := make(map[string][]string, len(m.seeds)) // seed -> its addresses
	want := map[string]bool{}
	var unresolved []string
	for _, seed := range m.seeds {
		a, ok := m.seedAddrsOf(seed)
		if !ok {
			unresolved = append(unresolved, seed)
			continue
		}
		addrs[seed] = a
		for _, x := range a {
			want[x] = false
		}
	}
	m.mu.Lock()
	for name, st := range m.members {
		if _, ok := want[st.Addr]; ok && (name == m.name || st.Status == StatusAlive) {
			want[st.Addr] = true
		}
	}
	m.mu.Unlock()
	missing := unresolved
	for _, seed := range m.seeds {
		a, ok := addrs[seed]
		if !ok {
			continue
		}
		for _, x := range a {
			if !want[x] {
				missing = append(missing, seed)
				break
			}
		}
	}
	return missing
}

// seedAddrsOf resolves a seed (a DNS name within resolveTimeout) to the
// addresses members are known at; false when it does not resolve (Join
// logs why).
func (m *Mesh) seedAddrsOf(seed string) ([]string, bool) {
	host, port, err := net.SplitHostPort(seed)
	if err != nil {
		return nil, false
	}
	var ips []net.IP
	if ip := net.ParseIP(host); ip != nil {
		ips = []net.IP{ip}
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
		addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
		cancel()
		if err != nil {
			return nil, false
		}
		for _, a := range addrs {
			ips = append(ips, a.IP)
		}
	}
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, net.JoinHostPort(ip.String(), port))
	}
	return out, len(out) > 0
}
