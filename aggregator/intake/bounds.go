package intake

import (
	"fmt"
	"slices"

	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// What the aggregator keeps of one node's messages is bounded here, where
// the messages enter (applyMessage, AdoptHandover), so that its memory is
// bounded by the number of nodes whatever they send. A message is at most
// mesh.EnvelopeLimit (4 MiB) on the wire; without these bounds the
// aggregator kept all of it per node (and once more per watch event).
const (
	// MaxSummaryBytes bounds a report's summary, which is of the same kind
	// as a reason.
	MaxSummaryBytes = 4 << 10
	// MaxDetailBytes bounds a report's detail_json: about 500 hung
	// processes at the ~250 bytes each of a real report (BenchmarkNodes'
	// report is 2 KB for 8). A bigger report is replaced by a note that
	// says where the whole one is: on the node, `nodeagent diagnose`.
	MaxDetailBytes = 128 << 10
	// MaxReportsKept bounds the reports kept per node (the agent sends the
	// latest of each violating job; a node rarely has more than a few).
	// Only the latest is served with its detail, so the others keep their
	// summary only.
	MaxReportsKept = 8
	// MaxTeardownsKept bounds the teardown clocks kept per node: the
	// jobs tearing down at once and those released recently; 64 is more
	// than a node runs jobs at once.
	MaxTeardownsKept = 64
	// MaxFieldBytes bounds the short fields of teardowns and reports (job
	// id, phase, stage, outcome): the agent's job ids are at most 128 bytes
	// (agent/api).
	MaxFieldBytes = 128
	// MaxForgetNames bounds the names of one Forget: one per request from
	// HTTP; 1,024 leaves room for a tool that forgets a decommissioned rack
	// in one message.
	MaxForgetNames = 1024
	// MaxAdoptedGone bounds the gone members adopted from other
	// aggregators' Handovers and not (yet) seen by this aggregator's own
	// mesh: the design's cluster size. Past it a Handover adopts nothing
	// more; the aggregators that saw those nodes go still serve them.
	MaxAdoptedGone = 10000
	// MaxAdoptedBytes bounds what the adopted gone members hold (by
	// proto.Size of their bounded meta and update): without it 10,000
	// maximal entries, each within the bounds above, could hold 2 GB. 64
	// MiB is 10,000 gone nodes with a 6 KB update each.
	MaxAdoptedBytes = 64 << 20
	// MaxUnseenNodes bounds the nodes known only from their direct
	// messages, of which the mesh has not told (a message may overtake the
	// member event, briefly). Past it a message from yet another such
	// name is dropped: the node's gossiped meta still brings it in.
	MaxUnseenNodes = 1024
	// MaxKillPathBytes is the proto's bound of StateUpdate.kill_path.
	MaxKillPathBytes = 256
)

// cutDetail returns d, or when it is longer than MaxDetailBytes a small
// JSON object that says so (a cut JSON document would not decode).
func cutDetail(d []byte) []byte {
	if len(d) <= MaxDetailBytes {
		return d
	}
	return fmt.Appendf(nil, `{"cut":true,"bytes":%d,"max_bytes":%d,"note":"the whole report is on the node: nodeagent diagnose --json"}`,
		len(d), MaxDetailBytes)
}

// BoundUpdate returns a copy of u within the bounds above, without the
// fields this build does not know (protobuf keeps them, and they could
// carry megabytes). The reports kept are the newest (by taken_ms), the
// teardowns the first MaxTeardownsKept (the agent lists active ones first);
// only the newest report keeps its detail, the one that is served
// (fillDetails). A StateUpdate comes once per state change of a node: the
// copy is cheap beside what it bounds.
func BoundUpdate(u *gwpb.StateUpdate) *gwpb.StateUpdate {
	if u == nil {
		return nil
	}
	c := &gwpb.StateUpdate{Meta: BoundMeta(u.GetMeta()), Reason: view.CutText(u.GetReason(), view.MaxUpdateReasonBytes), StartedMs: u.GetStartedMs(),
		Cause: BoundCause(u.GetCause()), Clean: u.GetClean(), AdminDrain: u.GetAdminDrain(),
		Mode: boundMode(u.GetMode()), ObservedCause: BoundCause(u.GetObservedCause()),
		KillPathFloorMs: u.GetKillPathFloorMs(), KillPath: view.CutText(u.GetKillPath(), MaxKillPathBytes)}
	tds := u.GetTeardowns()
	for _, td := range tds[:min(len(tds), MaxTeardownsKept)] {
		c.Teardowns = append(c.Teardowns, &gwpb.Teardown{
			Job:          view.CutText(td.GetJob(), MaxFieldBytes),
			Phase:        view.CutText(td.GetPhase(), MaxFieldBytes),
			EndedMs:      td.GetEndedMs(),
			DeadlineMs:   td.GetDeadlineMs(),
			ExpirationMs: td.GetExpirationMs(),
			GraceMs:      td.GetGraceMs(),
			Outcome:      view.CutText(td.GetOutcome(), MaxFieldBytes),
			ReleasedMs:   td.GetReleasedMs(),
			// Cut at MaxFieldBytes, past their own bound of 64: the
			// history refuses a user or command longer than that (a cut
			// one would look valid).
			User:    view.CutText(td.GetUser(), MaxFieldBytes),
			Command: view.CutText(td.GetCommand(), MaxFieldBytes),
		})
	}
	reps := slices.Clone(u.GetReports())
	// Newest first, by the time the view decodes (msTime: one out of range
	// is unknown, the oldest); of two of the same time the later one in
	// the message wins, as in fillDetails.
	slices.Reverse(reps)
	slices.SortStableFunc(reps, func(a, b *gwpb.Report) int { return view.MsTime(b.GetTakenMs()).Compare(view.MsTime(a.GetTakenMs())) })
	// A new slice: a resliced clone would keep the reports past the bound
	// (and their details) alive in its backing array.
	reps = slices.Clone(reps[:min(len(reps), MaxReportsKept)])
	for i, r := range reps {
		b := &gwpb.Report{
			Job:     view.CutText(r.GetJob(), MaxFieldBytes),
			Stage:   view.CutText(r.GetStage(), MaxFieldBytes),
			Outcome: view.CutText(r.GetOutcome(), MaxFieldBytes),
			Summary: view.CutText(r.GetSummary(), MaxSummaryBytes),
			TakenMs: r.GetTakenMs(),
		}
		if i == 0 {
			b.DetailJson = cutDetail(r.GetDetailJson())
		}
		reps[i] = b
	}
	slices.Reverse(reps) // oldest first again, as the agent sends them
	c.Reports = reps
	return c
}

// BoundMeta returns a copy of m with its reason cut to
// maxUpdateReasonBytes and without unknown fields. A gossiped meta is
// within memberlist's 512 bytes; one sent directly (in a StateUpdate or a
// ControlAck) is not.
func BoundMeta(m *gwpb.Meta) *gwpb.Meta {
	if m == nil {
		return nil
	}
	return &gwpb.Meta{
		Schema:      m.GetSchema(),
		Role:        m.GetRole(),
		Incarnation: m.GetIncarnation(),
		Seq:         m.GetSeq(),
		State:       m.GetState(),
		FreeAtMs:    m.GetFreeAtMs(),
		DeadlineMs:  m.GetDeadlineMs(),
		SinceMs:     m.GetSinceMs(),
		Reason:      view.CutText(m.GetReason(), view.MaxUpdateReasonBytes),
		Addr:        view.CutText(m.GetAddr(), MaxFieldBytes),
		StartedMs:   m.GetStartedMs(),
	}
}

// BoundEnvelope is env with its StateUpdate or ControlAck bounded (an
// update holds at most a report's detail and the short fields), as a new
// envelope of the known fields: unknown ones (a newer schema's, or
// padding) are not kept either. Other bodies are returned as they are.
func BoundEnvelope(env *gwpb.Envelope) *gwpb.Envelope {
	switch b := env.GetBody().(type) {
	case *gwpb.Envelope_State:
		return &gwpb.Envelope{Schema: env.GetSchema(), From: env.GetFrom(), To: env.GetTo(), SentMs: env.GetSentMs(),
			Body: &gwpb.Envelope_State{State: BoundUpdate(b.State)}}
	case *gwpb.Envelope_Ack:
		a := b.Ack
		return &gwpb.Envelope{Schema: env.GetSchema(), From: env.GetFrom(), To: env.GetTo(), SentMs: env.GetSentMs(),
			Body: &gwpb.Envelope_Ack{Ack: &gwpb.ControlAck{Id: view.CutText(a.GetId(), MaxFieldBytes), Ok: a.GetOk(),
				Error: view.CutText(a.GetError(), view.MaxUpdateReasonBytes), Meta: BoundMeta(a.GetMeta())}}}
	}
	return env
}
