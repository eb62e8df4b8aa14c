// Package meshfake is the mesh as the aggregator's Service sees it
// (aggregator.Mesh), in memory, for tests: the test sets members and
// delivers messages, which reach the Service as the real mesh's callbacks
// would, and Send records what it sends. It fakes the mesh only: it
// imports none of the aggregator's packages (TestImportsMeshOnly).
package meshfake

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// Mesh is an aggregator.Mesh for tests, in memory: the test sets members
// and delivers messages, which reach the Handler as the real mesh's
// callbacks would, and Send records what the aggregator sends. It is safe
// for concurrent use. (The compile-time check that it is an
// aggregator.Mesh is in the aggregator's tests: this package does not
// import the aggregator.)
type Mesh struct {
	// Handler receives SetMember's and Deliver's callbacks; set it before
	// use.
	Handler mesh.Handler

	now func() time.Time // stamps sent_ms

	mu      sync.Mutex
	members map[string]mesh.Member
	joined  bool
	sent    []Sent
	onSend  func(node string, env *gwpb.Envelope) error
	proven  map[string]string // SetProvenAddr's
}

// Sent is one envelope sent through a Mesh.
type Sent struct {
	Node string
	Env  *gwpb.Envelope
}

// New returns a joined fake mesh that calls h. Deliver stamps the
// envelopes it hands over with their send time, as the real mesh's sender
// does, by now (the Service's clock); nil is the wall clock.
func New(h mesh.Handler, now func() time.Time) *Mesh {
	if now == nil {
		now = time.Now
	}
	return &Mesh{Handler: h, members: map[string]mesh.Member{}, joined: true, now: now}
}

// SetProvenAddr records addr as where node proved it is reached (as
// mesh.Mesh.SetProvenAddr does, without checking it).
func (f *Mesh) SetProvenAddr(node, addr string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.proven == nil {
		f.proven = map[string]string{}
	}
	f.proven[node] = addr
	return nil
}

// ProvenAddr returns what SetProvenAddr recorded for node.
func (f *Mesh) ProvenAddr(node string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.proven[node]
	return a, ok
}

// SetMember adds or replaces a member and tells the Handler.
func (f *Mesh) SetMember(m mesh.Member) {
	f.mu.Lock()
	f.members[m.Name] = m
	f.mu.Unlock()
	f.Handler.MemberChanged(m)
}

// Deliver hands env from the named member to the Handler, as a direct
// message, with its sent_ms set to now unless it has one.
func (f *Mesh) Deliver(from string, env *gwpb.Envelope) {
	if env.From == "" {
		env.From = from
	}
	if env.SentMs == 0 {
		env.SentMs = f.now().UnixMilli()
	}
	f.Handler.HandleMessage(from, env)
}

// SetJoined sets what Joined reports.
func (f *Mesh) SetJoined(joined bool) {
	f.mu.Lock()
	f.joined = joined
	f.mu.Unlock()
}

// OnSend installs fn, called by every Send after it is recorded (on the
// sender's goroutine); its error is Send's. fn may call Deliver, e.g. to
// answer a Control with a ControlAck. The Service sends from several
// goroutines at once (an incident's resumes, for one): fn must be safe for
// concurrent use.
func (f *Mesh) OnSend(fn func(node string, env *gwpb.Envelope) error) {
	f.mu.Lock()
	f.onSend = fn
	f.mu.Unlock()
}

// Sent returns the envelopes sent so far.
func (f *Mesh) Sent() []Sent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sent)
}

// Members implements aggregator.Mesh.
func (f *Mesh) Members() []mesh.Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]mesh.Member, 0, len(f.members))
	for _, m := range f.members {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b mesh.Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Send implements aggregator.Mesh: it records env and calls the OnSend function. A
// member that is not known is an error, as with the real mesh, which also
// tries a member it holds dead or left (memberlist's word is no proof).
func (f *Mesh) Send(node string, env *gwpb.Envelope) error {
	f.mu.Lock()
	_, ok := f.members[node]
	f.sent = append(f.sent, Sent{Node: node, Env: env})
	fn := f.onSend
	f.mu.Unlock()
	if !ok {
		return fmt.Errorf("send to %s: %w", node, mesh.ErrUnknownMember)
	}
	if fn != nil {
		return fn(node, env)
	}
	return nil
}

// Joined implements aggregator.Mesh.
func (f *Mesh) Joined() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.joined
}

// NumMembers implements aggregator.Mesh: the members alive or suspect.
func (f *Mesh) NumMembers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, m := range f.members {
		if m.Status == mesh.StatusAlive || m.Status == mesh.StatusSuspect {
			n++
		}
	}
	return n
}

// AgentMember returns an alive agent member publishing meta, since t.
func AgentMember(name string, meta *gwpb.Meta, t time.Time) mesh.Member {
	return mesh.Member{Name: name, Role: gwpb.Role_ROLE_AGENT, Meta: meta, Status: mesh.StatusAlive, Since: t}
}
