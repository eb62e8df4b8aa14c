package httpapi

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/actuate"
	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/incident"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/hostlist"
)

// The incidents' HTTP API (proto/openapi.yaml): GET /v1/incidents (read)
// and POST /v1/incidents/{id}/confirm (admin).

// Type names of the API's incident types, as the server serves them.
type (
	IncidentList           = api.IncidentList
	IncidentConfirmation   = api.IncidentConfirmation
	IncidentConfirmRequest = api.IncidentConfirmRequest
)

func (s *Server) handleIncidents(w http.ResponseWriter, r *http.Request) {
	incs, lim := s.svc.Incidents()
	now := s.svc.Now()
	out := api.IncidentList{Incidents: make([]api.Incident, 0, len(incs)), AutoResume: s.svc.AutoResume(),
		Leader: s.svc.Leading(),
		Limit: api.DrainLimit{Enabled: lim.Enabled, Limit: lim.Limit, Used: lim.Used, Window: lim.Window.Seconds(),
			KnownNodes: lim.Known, Held: lim.HeldCount}}
	for _, inc := range incs {
		out.Incidents = append(out.Incidents, wireIncident(inc, lim, now))
	}
	s.writeJSON(w, http.StatusOK, out)
}

// wireIncident is inc as the HTTP API serves it.
func wireIncident(inc incident.Incident, lim actuate.LimitStatus, now time.Time) api.Incident {
	held := lim.Held[inc.ID]
	w := api.Incident{ID: inc.ID, State: "open", Kind: string(inc.Cause.Kind), Cause: inc.Cause.String(),
		FSType: inc.Cause.FSType, Source: inc.Cause.Source, Mountpoint: inc.Cause.Mountpoint, Wchan: inc.Cause.Wchan,
		Nodes: apiHostlist(inc.Nodes), Count: len(inc.Nodes), Peak: inc.Peak,
		Clean: apiHostlist(inc.Clean), CleanCount: len(inc.Clean),
		Held: apiHostlist(held), HeldCount: len(held),
		Classes: inc.Counts.Map(), FirstSeen: view.ServedTime(inc.FirstSeen), LastSeen: view.ServedTime(inc.LastSeen),
		Duration: inc.Duration(now).Seconds()}
	if c, ok := lim.Confirmed[inc.ID]; ok {
		w.Confirmed = true
		w.Confirmation = wireConfirmation(c)
	}
	if !inc.Open() {
		w.State = "closed"
		w.Closed = wireTime(view.ServedTime(inc.Closed))
	}
	if e := inc.Example; e.Node != "" {
		w.Example = &api.IncidentExample{Node: e.Node, Job: e.Job, PID: e.PID, Comm: e.Comm, Class: e.Class, Wchan: e.Wchan}
	}
	return w
}

// wireConfirmation is what a confirmation covers, as the HTTP API serves
// it.
func wireConfirmation(c actuate.ConfirmScope) *api.Confirmation {
	return &api.Confirmation{At: view.ServedTime(c.At), Nodes: apiHostlist(c.Nodes), Count: len(c.Nodes), Until: wireTime(view.ServedTime(c.Until))}
}

// apiHostlist is names as a hostlist; names that make none (they are all
// valid node names, so never) are listed with commas.
func apiHostlist(names []string) string {
	hl, err := hostlist.Compress(names)
	if err != nil {
		return fmt.Sprint(names)
	}
	return hl
}

func (s *Server) handleConfirmIncident(w http.ResponseWriter, r *http.Request) {
	raw := r.PathValue("id")
	id, err := strconv.ParseUint(raw, 10, 64)
	if err != nil || id == 0 {
		s.writeError(w, http.StatusBadRequest, "path %s: incident id %q is not a positive integer", r.URL.EscapedPath(), raw)
		return
	}
	req, ok := readBody(s, w, r, decodeConfirm)
	if !ok {
		return
	}
	by := fmt.Sprintf("%s (HTTP from %s)", s.svc.Name(), r.RemoteAddr)
	scope, err := s.svc.ConfirmIncident(id, req.Reason, by, confirmFor(req))
	switch {
	case err == nil:
		s.writeJSON(w, http.StatusOK, api.IncidentConfirmation{ID: id, Released: scope.Released, Confirmation: *wireConfirmation(scope)})
	case FailureOf(err) == NotFound:
		s.writeError(w, http.StatusNotFound, "unknown incident %d (GET /v1/incidents lists them; ids are each aggregator's own)", id)
	case FailureOf(err) == Conflict:
		s.writeError(w, http.StatusConflict, "%v", err)
	default:
		s.writeError(w, http.StatusInternalServerError, "%v", err)
	}
}

// decodeConfirm reads the body of POST /v1/incidents/{id}/confirm: a
// reason as for a node's resume, and an optional for, in seconds, 0 to
// api.MaxConfirmFor.
func decodeConfirm(r io.Reader) (IncidentConfirmRequest, error) {
	var req IncidentConfirmRequest
	if err := decodeStrict(r, &req, `{"reason": "...", "for": seconds}`, "reason and for"); err != nil {
		return req, err
	}
	if err := validateReason(req.Reason); err != nil {
		return req, err
	}
	if f := req.For; math.IsNaN(f) || f < 0 || f > api.MaxConfirmFor.Seconds() {
		return req, fmt.Errorf("for: want 0 (the incident's nodes now only) to %v seconds, got %v", api.MaxConfirmFor.Seconds(), f)
	}
	return req, nil
}

// confirmFor is req's for as a duration (decodeConfirm bounded it).
func confirmFor(req IncidentConfirmRequest) time.Duration {
	return time.Duration(req.For * float64(time.Second))
}
