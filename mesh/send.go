package mesh

// Direct messages: what a member sends to another over TCP.

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gracewatch/gracewatch/proto/gwpb"
	"github.com/hashicorp/memberlist"
)

// MaxDelivery bounds how long after its send time (sent_ms, stamped before
// the dial) a direct message can arrive: memberlist dials and writes a
// reliable send within its TCP timeout, 10 s in the LAN profile (1 s in the
// local one). On a lossy network a delivery really takes seconds: a new
// connection that loses its SYN or SYN-ACK retries only 1 s later, then
// 3 s. A receiver that checks send times against its own clock adds this
// to its clock allowance.
var MaxDelivery = memberlist.DefaultLANConfig().TCPTimeout

// Send sends env's body to the named member over TCP (memberlist
// SendReliable), in an envelope of this member's (schema, from, to, sent_ms
// set here; env is not modified) with its proof. It blocks for up to the
// profile's TCP timeout. Errors name the node and wrap ErrUnknownMember,
// ErrNotAlive, ErrClosed or ErrTooLarge where they apply.
func (m *Mesh) Send(node string, env *gwpb.Envelope) error {
	b, err := m.encode(env, node)
	if err != nil {
		return fmt.Errorf("send to %s: %w", node, err)
	}
	return m.sendBytes(node, b)
}

// SendToRole sends env (as Send does, with no to) to every alive member of
// role but this one, in parallel. It returns how many sends succeeded and the
// failures, joined. No such member is not an error: sent is 0.
func (m *Mesh) SendToRole(role gwpb.Role, env *gwpb.Envelope) (sent int, err error) {
	b, err := m.encode(env, "")
	if err != nil {
		return 0, fmt.Errorf("send to role %s: %w", role, err)
	}
	targets := m.AliveMembers(role)
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	sem := make(chan struct{}, sendParallel)
	for i, name := range targets {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = m.sendBytes(name, b)
		}()
	}
	wg.Wait()
	for _, e := range errs {
		if e == nil {
			sent++
		}
	}
	return sent, errors.Join(errs...)
}

func (m *Mesh) encode(env *gwpb.Envelope, to string) ([]byte, error) {
	if env == nil {
		return nil, errors.New("nil envelope")
	}
	// A new envelope around the same body: env may be sent to several
	// members at once.
	out := &gwpb.Envelope{Schema: gwpb.SchemaVersion, From: m.name, To: to, SentMs: m.now().UnixMilli(), Body: env.Body}
	b, err := EncodeEnvelope(out)
	if err != nil {
		return nil, err
	}
	return m.guard.sealEnvelope(b), nil
}

func (m *Mesh) sendBytes(node string, b []byte) error {
	if m.closed(false) {
		return fmt.Errorf("send to %s: %w", node, ErrClosed)
	}
	// memberlist's word that a member is dead or left is no proof (see
	// alive.go): the message goes to the last address known, and for an
	// aggregator of the book to the address it signed. Only a member never
	// seen is not tried. A node that proved its address (reach.go) is
	// reached there, whatever gossip says.
	m.mu.Lock()
	var to memberlist.Node
	var addr string
	if e := m.book[node]; e != nil {
		to, addr = memberlist.Node{Name: node, Addr: e.ip, Port: e.port}, e.Addr
	} else if ap, ok := m.reach[node]; ok {
		// The address the node proved (reach.go), not gossip's.
		to, addr = memberlist.Node{Name: node, Addr: ap.Addr().AsSlice(), Port: ap.Port()}, ap.String()
	} else if st := m.members[node]; st != nil && st.ip != nil {
		to, addr = memberlist.Node{Name: node, Addr: st.ip, Port: st.port}, st.Addr
	} else {
		m.mu.Unlock()
		return fmt.Errorf("send to %s: %w", node, ErrUnknownMember)
	}
	m.mu.Unlock()
	if err := m.ml.SendReliable(&to, b); err != nil {
		return fmt.Errorf("send to %s at %s: %w", node, addr, err)
	}
	m.noteContact(node, m.now())
	return nil
}
