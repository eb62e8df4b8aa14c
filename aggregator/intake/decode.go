package intake

// The intake's decoding: gossip and StateUpdates (the wire's gwpb types),
// once bounded (bounds.go), become the internal node input (aggregator/view)
// here, checked once; a Handover carries that input back in the wire's
// form (EncodeMeta, EncodeUpdate). Nothing past this file and the intake
// reads the wire's types of a node's state.

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/gracewatch/gracewatch/agent/report"
	agentrequest "github.com/gracewatch/gracewatch/agent/request"
	"github.com/gracewatch/gracewatch/aggregator/history"
	"github.com/gracewatch/gracewatch/aggregator/incident"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/config"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// DecodeMeta is m as the view keeps it; nil for nil. Its reason is cut to
// maxUpdateReasonBytes (a gossiped meta is within memberlist's 512 bytes, a
// direct one is not); times out of range are unknown (msTime).
func DecodeMeta(m *gwpb.Meta) *view.NodeMeta {
	if m == nil {
		return nil
	}
	return &view.NodeMeta{Incarnation: m.GetIncarnation(), Seq: m.GetSeq(), State: view.AgentState(m.GetState()),
		Since: view.MsTime(m.GetSinceMs()), FreeAt: view.MsTime(m.GetFreeAtMs()), Deadline: view.MsTime(m.GetDeadlineMs()),
		Reason: view.CutText(m.GetReason(), view.MaxUpdateReasonBytes)}
}

// DecodeUpdate is u, a StateUpdate bounded by BoundUpdate, as the view
// keeps it; nil when u is nil or has no meta. A cause that breaks its
// bounds (CheckCause) is dropped; a teardown's user or command that breaks
// the proto's rule is dropped (servedUser, servedCommand); a report's
// detail that is not valid JSON is dropped.
func DecodeUpdate(u *gwpb.StateUpdate) *view.NodeUpdate {
	if u.GetMeta() == nil {
		return nil
	}
	d := &view.NodeUpdate{Meta: DecodeMeta(u.GetMeta()), Reason: view.CutText(u.GetReason(), view.MaxUpdateReasonBytes), StartedMs: u.GetStartedMs(),
		Clean: u.GetClean(), AdminDrain: u.GetAdminDrain(), Mode: config.ModeEnforce,
		KillPathFloor: msDuration(u.GetKillPathFloorMs()), KillPath: view.CutText(u.GetKillPath(), MaxKillPathBytes)}
	if CheckCause(u.GetCause()) == nil {
		d.Cause = decodeCause(u.GetCause())
	}
	if CheckCause(u.GetObservedCause()) == nil {
		d.ObservedCause = decodeCause(u.GetObservedCause())
	}
	if u.GetMode() == gwpb.Mode_MODE_OBSERVE {
		d.Mode = config.ModeObserve
	}
	tds := u.GetTeardowns()
	tds = tds[:min(len(tds), MaxTeardownsKept)]
	d.Teardowns = make([]view.Teardown, 0, len(tds))
	for _, td := range tds {
		d.Teardowns = append(d.Teardowns, view.Teardown{
			Job:        view.CutText(td.GetJob(), MaxFieldBytes),
			Phase:      view.CutText(td.GetPhase(), MaxFieldBytes),
			Ended:      view.MsTime(td.GetEndedMs()),
			Deadline:   view.MsTime(td.GetDeadlineMs()),
			Expiration: view.MsTime(td.GetExpirationMs()),
			Grace:      msDuration(td.GetGraceMs()),
			Outcome:    view.CutText(td.GetOutcome(), MaxFieldBytes),
			Released:   view.MsTime(td.GetReleasedMs()),
			User:       servedUser(td.GetUser()),
			Command:    servedCommand(td.GetCommand()),
		})
	}
	for _, r := range u.GetReports() {
		rep := view.Report{Job: view.CutText(r.GetJob(), MaxFieldBytes), Stage: view.CutText(r.GetStage(), MaxFieldBytes),
			Outcome: view.CutText(r.GetOutcome(), MaxFieldBytes), Summary: view.CutText(r.GetSummary(), MaxSummaryBytes),
			Taken: view.MsTime(r.GetTakenMs())}
		if dj := r.GetDetailJson(); len(dj) > 0 && json.Valid(dj) {
			rep.Detail = json.RawMessage(dj)
		}
		d.Reports = append(d.Reports, rep)
	}
	return d
}

// msDuration converts milliseconds from the wire; zero, negative and
// out-of-range values (a buggy or hostile sender) give 0.
func msDuration(ms int64) time.Duration {
	if ms <= 0 || ms > math.MaxInt64/int64(time.Millisecond) {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}

// msOf is t in Unix milliseconds for the wire; 0 for the zero time.
func msOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// EncodeMeta is m in the wire's form (a Handover carries it); nil for nil.
func EncodeMeta(m *view.NodeMeta) *gwpb.Meta {
	if m == nil {
		return nil
	}
	return &gwpb.Meta{Schema: gwpb.SchemaVersion, Role: gwpb.Role_ROLE_AGENT, Incarnation: m.Incarnation, Seq: m.Seq,
		State: gwpb.State(m.State), SinceMs: msOf(m.Since), FreeAtMs: msOf(m.FreeAt), DeadlineMs: msOf(m.Deadline), Reason: m.Reason}
}

// EncodeUpdate is u in the wire's form (a Handover carries it): decoded
// again, it gives u. Nil for nil.
func EncodeUpdate(u *view.NodeUpdate) *gwpb.StateUpdate {
	if u == nil {
		return nil
	}
	w := &gwpb.StateUpdate{Meta: EncodeMeta(u.Meta), Reason: u.Reason, StartedMs: u.StartedMs, Cause: encodeCause(u.Cause),
		Clean: u.Clean, AdminDrain: u.AdminDrain, Mode: gwpb.Mode_MODE_ENFORCE, ObservedCause: encodeCause(u.ObservedCause),
		KillPathFloorMs: u.KillPathFloor.Milliseconds(), KillPath: u.KillPath}
	if u.Mode == config.ModeObserve {
		w.Mode = gwpb.Mode_MODE_OBSERVE
	}
	for _, td := range u.Teardowns {
		w.Teardowns = append(w.Teardowns, &gwpb.Teardown{Job: td.Job, Phase: td.Phase, EndedMs: msOf(td.Ended),
			DeadlineMs: msOf(td.Deadline), ExpirationMs: msOf(td.Expiration), GraceMs: td.Grace.Milliseconds(), Outcome: td.Outcome,
			ReleasedMs: msOf(td.Released), User: td.User, Command: td.Command})
	}
	for _, r := range u.Reports {
		w.Reports = append(w.Reports, &gwpb.Report{Job: r.Job, Stage: r.Stage, Outcome: r.Outcome, Summary: r.Summary,
			TakenMs: msOf(r.Taken), DetailJson: []byte(r.Detail)})
	}
	return w
}

// encodeCause is c in the wire's form; nil for nil.
func encodeCause(c *view.NodeCause) *gwpb.Cause {
	if c == nil {
		return nil
	}
	n := func(v int) uint32 { return uint32(min(max(v, 0), maxCauseCount)) }
	return &gwpb.Cause{Fstype: c.FSType, Source: c.Source, Mountpoint: c.Mountpoint, Wchan: c.Wchan, Class: c.Class,
		Unkillable: n(c.Counts[0]), ExitHang: n(c.Counts[1]), KillableD: n(c.Counts[2]), Missed: n(c.Counts[3]),
		Dying: n(c.Counts[4]), Zombie: n(c.Counts[5]), ExamplePid: int32(c.ExamplePID), ExampleComm: c.ExampleComm, Job: c.Job}
}

// maxCauseCount bounds each count of a cause (a node's processes of one
// class): far above the agent's report bound, a sum over 10,000 nodes
// still fits an int.
const maxCauseCount = 1 << 20

// CheckCause checks a node's cause by agent/report's bounds: every string
// printable UTF-8 within its bound, a known class. A nil cause is valid.
func CheckCause(c *gwpb.Cause) error {
	if c == nil {
		return nil
	}
	rc := report.Cause{FSType: c.GetFstype(), Source: c.GetSource(), Mountpoint: c.GetMountpoint(), Wchan: c.GetWchan(),
		Class: report.Class(c.GetClass()), ExamplePID: int(c.GetExamplePid()), ExampleComm: c.GetExampleComm(), Job: c.GetJob()}
	if err := rc.Check(); err != nil {
		return err
	}
	if rc.Empty() {
		return fmt.Errorf("cause: names neither a file system nor a wait channel")
	}
	return nil
}

// decodeCause is c as the view keeps it; nil for nil. c was checked.
func decodeCause(c *gwpb.Cause) *view.NodeCause {
	if c == nil {
		return nil
	}
	n := func(v uint32) int { return int(min(v, maxCauseCount)) }
	return &view.NodeCause{
		FSType: c.GetFstype(), Source: c.GetSource(), Mountpoint: c.GetMountpoint(), Wchan: c.GetWchan(), Class: c.GetClass(),
		Counts: incident.Counts{n(c.GetUnkillable()), n(c.GetExitHang()), n(c.GetKillableD()), n(c.GetMissed()),
			n(c.GetDying()), n(c.GetZombie())},
		ExamplePID: int(c.GetExamplePid()), ExampleComm: c.GetExampleComm(), Job: c.GetJob(),
	}
}

// BoundCause is a copy of c without unknown fields (bounds.go copies a
// StateUpdate's known fields only); the intake checks it (intakeLatch).
func BoundCause(c *gwpb.Cause) *gwpb.Cause {
	if c == nil {
		return nil
	}
	return &gwpb.Cause{Fstype: c.GetFstype(), Source: c.GetSource(), Mountpoint: c.GetMountpoint(), Wchan: c.GetWchan(),
		Class: c.GetClass(), Unkillable: c.GetUnkillable(), ExitHang: c.GetExitHang(), KillableD: c.GetKillableD(),
		Missed: c.GetMissed(), Dying: c.GetDying(), Zombie: c.GetZombie(), ExamplePid: c.GetExamplePid(),
		ExampleComm: c.GetExampleComm(), Job: c.GetJob()}
}

// boundMode is m, or MODE_UNSPECIFIED for a value this build does not
// know (the schema's rule for enums).
func boundMode(m gwpb.Mode) gwpb.Mode {
	if m == gwpb.Mode_MODE_ENFORCE || m == gwpb.Mode_MODE_OBSERVE {
		return m
	}
	return gwpb.Mode_MODE_UNSPECIFIED
}

// servedUser is u when it is a user name by the proto's rule
// (agent/request.ValidateUser), else "": a node's label is shown only when
// it is well formed.
func servedUser(u string) string {
	if agentrequest.ValidateUser(u) != nil {
		return ""
	}
	return u
}

// servedCommand is c when it is a command by the proto's rule (printable
// UTF-8 within 64 bytes, history.ValidCommand, the rule the history keeps
// records by), else "".
func servedCommand(c string) string {
	if !history.ValidCommand(c) {
		return ""
	}
	return c
}

// RoleOf is r as NodeInput.Role names it.
func RoleOf(r gwpb.Role) string {
	switch r {
	case gwpb.Role_ROLE_AGENT:
		return view.RoleAgent
	case gwpb.Role_ROLE_AGGREGATOR:
		return view.RoleAggregator
	}
	return view.RoleUnspecified
}
