package aggregator

// The Service's side of its incidents (package aggregator/incidents keeps
// them, over the pure grouping of aggregator/incident): what the tracker
// asks of the Service, the readiness it adds to /readyz, and the
// administrator's confirmation.

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/actuate"
	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/incident"
	"github.com/gracewatch/gracewatch/aggregator/incidents"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// Errors of ConfirmIncident.
var (
	ErrUnknownIncident = incidents.ErrUnknownIncident
	ErrIncidentClosed  = incidents.ErrIncidentClosed
	ErrNotLeader       = incidents.ErrNotLeader
	ErrConfirmFor      = incidents.ErrConfirmFor
)

// MaxConfirmFor bounds ConfirmIncident's d (api.MaxConfirmFor).
const MaxConfirmFor = api.MaxConfirmFor

// maxSkewListed bounds the nodes /readyz names with their clock offset.
const maxSkewListed = 10

// newIncidents returns the incidents' tracker of s, which needs its
// actuators, metrics and lines.
func (s *Service) newIncidents() *incidents.Tracker {
	return incidents.New(incidents.Deps{
		Config:    s.opts.Incidents,
		Allowance: s.opts.Policy.ClockSkewAllowance,
		Name:      s.opts.Name,
		Actuators: s.act,
		Counters:  s.met,
		Resume: func(ctx context.Context, node, reason, by string) error {
			_, err := s.control(ctx, node, &gwpb.Control{Action: gwpb.Action_ACTION_RESUME, Reason: reason, By: by}, slog.LevelDebug)
			return err
		},
		Leader: func() string { _, leader := s.Aggregators(); return leader },
		Clock:  s.clock,
		Log:    s.log,
		Lines:  s.lines,
	})
}

// autoResume resumes the clean nodes of the incidents whose cause cleared,
// when this aggregator leads (incidents.Tracker.AutoResume). It runs on
// the loop.
func (s *Service) autoResume(now time.Time) {
	s.inc.AutoResume(s.runCtx, now, s.leading, func(name string) (view.Node, bool) {
		n, ok := s.view[name] // the loop's to read
		return n, ok
	})
}

// clockAllowance is the clock offset past which a node is flagged
// (incidents.ClockAllowance).
func (s *Service) clockAllowance() time.Duration {
	return incidents.ClockAllowance(s.opts.Policy.ClockSkewAllowance)
}

// Incidents returns the open incidents and the last closed ones (by id),
// and the blast-radius limit's state. Safe for concurrent use.
func (s *Service) Incidents() ([]incident.Incident, actuate.LimitStatus) { return s.inc.Incidents() }

// ConfirmIncident records an administrator's confirmation of incident id
// (docs/DESIGN.md §5b; incidents.Tracker.Confirm says what it covers). It
// returns how many held drains it let through and what the confirmation
// covers. Errors: ErrUnknownIncident, ErrIncidentClosed, ErrNotLeader (the
// leader holds the drains: confirm there; incident ids are each
// aggregator's own), ErrConfirmFor (d is negative or past MaxConfirmFor).
// Safe for concurrent use.
func (s *Service) ConfirmIncident(id uint64, reason, by string, d time.Duration) (actuate.ConfirmScope, error) {
	return s.inc.Confirm(id, reason, by, d)
}

// incidentReadiness adds the held drains and the nodes whose clock is off
// to r.
func (s *Service) incidentReadiness(r *api.Readiness, detail *[]string) {
	st := s.act.LimitStatus()
	r.HeldDrains = st.HeldCount
	if st.HeldCount > 0 {
		*detail = append(*detail, fmt.Sprintf("%d drains held by the blast-radius limit (%d within %v): see aggregator incidents; aggregator incident confirm ID lets an incident's through",
			st.HeldCount, st.Limit, st.Window))
	}
	skewed := s.inc.Skewed()
	names := slices.Sorted(maps.Keys(skewed))
	for _, name := range names[:min(len(names), maxSkewListed)] {
		r.ClockSkewed = append(r.ClockSkewed, api.ClockSkew{Node: name, OffsetSeconds: -skewed[name].Seconds()})
	}
	r.ClockSkewedNodes = len(names)
	if len(names) > 0 {
		*detail = append(*detail, fmt.Sprintf("%d nodes' clocks disagree with this aggregator's by more than %v: their deadline DOWNs wait for the deadline here",
			len(names), s.clockAllowance()))
	}
}
