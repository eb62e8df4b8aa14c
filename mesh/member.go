package mesh

import (
	"time"

	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// Status is a member's liveness as this process sees it.
type Status string

// Member statuses.
const (
	StatusAlive Status = "alive"
	// StatusSuspect is reserved: memberlist v0.7.0 tells its delegates
	// nothing about suspicion (no event, and Node.State is never filled
	// in), so a suspected member is reported alive until it is declared
	// dead.
	StatusSuspect Status = "suspect"
	// StatusDead: the mesh's failure detector declared the member dead.
	StatusDead Status = "dead"
	// StatusLeft: the member left on purpose (Mesh.Leave).
	StatusLeft Status = "left"
)

// Member is one mesh member as this process sees it. A Member is a value:
// the *gwpb.Meta in it is shared with other copies and must be treated as
// read-only.
type Member struct {
	Name string
	Addr string    // host:port
	Role gwpb.Role // from its meta; ROLE_UNSPECIFIED if the meta did not decode or names a role this build does not know
	// Meta is nil if MetaErr != nil or the member published no meta, and
	// at an agent for another agent (an agent has no use for it: it is not
	// decoded).
	Meta *gwpb.Meta
	// MetaErr says why the meta did not decode. It is logged once per node
	// and meta value, and never stops the mesh.
	MetaErr error
	// Proven: the meta's proof checked out here. Only an aggregator's meta
	// carries one (its role is then proven); an agent's meta is a claim,
	// its state proven by its direct StateUpdates only (mesh/auth.go).
	Proven bool
	// Signs: this member has proven a direct message here (it has its
	// key): even where unproven input is accepted (allow_unsigned), its
	// state is to be taken from its proven messages, not from its meta.
	Signs  bool
	Status Status
	Since  time.Time // when Status last changed, as seen here
}

// Handler receives what the mesh hears. Both methods run on memberlist's
// goroutines, MemberChanged with memberlist's member lock held: they must
// not block and must not call back into the Mesh (hand off to a channel).
type Handler interface {
	// HandleMessage gets every direct message that decoded; from is the
	// sender's name as the envelope claims it. env.Body is nil for a body
	// type of a newer schema. Undecodable messages are logged (rate
	// limited per claimed sender) and dropped.
	HandleMessage(from string, env *gwpb.Envelope)
	// MemberChanged is called after a member (this one included) joins,
	// changes its meta, leaves (Status dead or left) or comes back.
	MemberChanged(m Member)
}

// knownRole returns r, or ROLE_UNSPECIFIED for a value this build does not
// know (a newer schema's role).
func knownRole(r gwpb.Role) gwpb.Role {
	if _, ok := gwpb.Role_name[int32(r)]; ok {
		return r
	}
	return gwpb.Role_ROLE_UNSPECIFIED
}
