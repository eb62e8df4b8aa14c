package intake

import (
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/nodename"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// MaxHandover bounds the members one Handover carries, and adopts: the
// design's cluster size (a cluster that lost more nodes than this has
// bigger problems; the rest are still served by the aggregators that saw
// them go). 10,000 gone members with bounded updates are at most a few
// MB; the mesh's EnvelopeLimit (4 MiB) bounds the message itself.
const MaxHandover = 10000

// HandoverOf is the Handover of the agents in inputs that are dead or have
// left, sorted by name. memberlist forgets a dead member GossipToTheDeadTime
// after its death, so a newly started aggregator would otherwise never know
// a node that died before it came: two aggregators would then answer
// differently for it (one unreachable, the other unknown).
func HandoverOf(inputs map[string]*view.NodeInput) *gwpb.Handover {
	h := &gwpb.Handover{}
	for _, in := range inputs {
		if !view.Gone(in.Status) || in.Role != view.RoleAgent {
			continue
		}
		g := &gwpb.GoneMember{Name: in.Name, Left: in.Status == mesh.StatusLeft, Meta: EncodeMeta(in.Gossip),
			Update: EncodeUpdate(in.Update)}
		if !in.StatusSince.IsZero() {
			g.SinceMs = in.StatusSince.UnixMilli()
		}
		h.Gone = append(h.Gone, g)
	}
	slices.SortFunc(h.Gone, func(a, b *gwpb.GoneMember) int {
		switch {
		case a.GetName() < b.GetName():
			return -1
		case a.GetName() > b.GetName():
			return 1
		}
		return 0
	})
	if len(h.Gone) > MaxHandover {
		h.Gone = h.Gone[:MaxHandover]
	}
	return h
}

// AdoptHandover adds the gone members of h that this aggregator does not
// know at all to inputs, marking them in dirty, at most budget of them
// (and at most MaxHandover of h's entries are looked at). A member it knows
// in any state is left alone: its own mesh is the better witness, and a
// member that comes back is updated by the mesh as usual; so a name that
// h repeats, or that an earlier Handover brought, is adopted once. Names
// for which skip returns true (this aggregator, the other aggregators,
// names that are not node names) are ignored, and so is any other invalid
// name. What is kept of each is bounded (BoundMeta, BoundUpdate). It
// returns the names it adopted and how many more it would have adopted
// past budget (a count) or budgetBytes (what they hold, by proto.Size),
// with the bytes each adopted one holds.
func AdoptHandover(inputs map[string]*view.NodeInput, h *gwpb.Handover, skip func(string) bool, dirty map[string]bool,
	budget, budgetBytes int) (adopted map[string]int, over int) {
	adopted = map[string]int{}
	used := 0
	for i, g := range h.GetGone() {
		if i >= MaxHandover {
			break
		}
		name := g.GetName()
		if skip(name) || !nodename.Valid(name) {
			continue
		}
		if _, known := inputs[name]; known {
			continue
		}
		if len(adopted) >= budget {
			over++
			continue
		}
		in := &view.NodeInput{Name: name, Role: view.RoleAgent, Status: mesh.StatusDead}
		if g.GetLeft() {
			in.Status = mesh.StatusLeft
		}
		in.StatusSince = view.MsTime(g.GetSinceMs())
		gossip := BoundMeta(g.GetMeta())
		in.Gossip = DecodeMeta(gossip)
		var update *gwpb.StateUpdate
		if u := g.GetUpdate(); u != nil && u.GetMeta() != nil {
			update = BoundUpdate(u)
			in.Update = DecodeUpdate(update)
			in.Direct = in.Update.Meta
		}
		size := len(name) + proto.Size(gossip) + proto.Size(update)
		if used+size > budgetBytes {
			over++
			continue
		}
		used += size
		inputs[name] = in
		dirty[name] = true
		adopted[name] = size
	}
	return adopted, over
}
