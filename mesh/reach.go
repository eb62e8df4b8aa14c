package mesh

// Where a node is reached: its own proven word, never gossip alone.
//
// memberlist takes a member's address from any alive message about it
// that beats the incarnation it holds, and anyone with the mesh key can
// write one (internal/testutil/rogue): a forged leave of a node at the
// highest incarnation, an alive for it at the attacker's address, then a
// dead message, and every probe and control the aggregator sent to that
// node went to the attacker, which did not answer: the idle, healthy node
// was served unreachable, then down, and drained. An agent's metas are not
// signed (only aggregators sign theirs: book.go); its direct StateUpdates
// are, under its node key. So an agent puts its own mesh address in the
// meta of every direct StateUpdate (Meta.addr), and the aggregator, having
// accepted such an update as the node's newest, records it here with
// SetProvenAddr: from then on Send goes to that address whatever gossip
// says, until a newer proven update names another (the node moved), and
// gossip's address is used only for a node that never proved one (an
// agent of an earlier release, or a mesh without node restriction, where
// no word is proven and the address is no better than gossip's).

import (
	"fmt"
	"net/netip"
)

// maxProvenAddrs bounds the proven addresses kept: each is a node that
// proved itself with its own key, so a site's node count bounds them; past
// it (a site of more than 65,536 nodes) the newcomers are reached at
// gossip's address, as before.
const maxProvenAddrs = 1 << 16

// SetProvenAddr records addr ("IP:port") as where node is reached: the
// address its own proven message named. The caller vouches for the proof
// and for the message being the node's newest. An address that does not
// parse, or an unspecified or multicast IP, or port 0, is refused with an
// error that says why.
func (m *Mesh) SetProvenAddr(node, addr string) error {
	ap, err := netip.ParseAddrPort(addr)
	switch {
	case err != nil:
		return fmt.Errorf("proven address of %s: %w", node, err)
	case ap.Port() == 0 || !ap.Addr().IsValid() || ap.Addr().IsUnspecified() || ap.Addr().IsMulticast():
		return fmt.Errorf("proven address of %s: %s cannot be dialled", node, addr)
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.reach[node]; ok && old == ap {
		return nil
	} else if !ok && len(m.reach) >= maxProvenAddrs {
		return fmt.Errorf("proven address of %s: %d nodes' addresses kept already", node, maxProvenAddrs)
	}
	m.reach[node] = ap
	return nil
}

// ProvenAddr returns the address node proved, if any.
func (m *Mesh) ProvenAddr(node string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ap, ok := m.reach[node]
	if !ok {
		return "", false
	}
	return ap.String(), true
}
