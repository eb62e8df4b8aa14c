package meshlink

import (
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// fakeMesh is a Mesh whose aggregators are the alive members it names,
// none of them in its book (aggregators without keys). It puts what is
// sent on sent, when there is one, and otherwise drops it.
type fakeMesh struct {
	aggregators []string
	sent        chan meshSend
}

// meshSend is one message sent through a fakeMesh.
type meshSend struct {
	to  string
	env *gwpb.Envelope
}

var _ Mesh = fakeMesh{}

func (f fakeMesh) Send(to string, env *gwpb.Envelope) error {
	if f.sent != nil {
		f.sent <- meshSend{to: to, env: env}
	}
	return nil
}

func (fakeMesh) SetMeta(*gwpb.Meta) error          { return nil }
func (fakeMesh) Proves() bool                      { return false }
func (fakeMesh) Addr() string                      { return "" }
func (fakeMesh) Aggregators() []mesh.AggregatorRef { return nil }

func (f fakeMesh) AliveMembers(role gwpb.Role) []string {
	if role != gwpb.Role_ROLE_AGGREGATOR {
		return nil
	}
	return f.aggregators
}
