package aggregator

import (
	"net/http"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/reservation"
)

// ReservationList is the body of GET /v1/reservations: the scheduler's
// reservations that gracewatch keeps on nodes tearing down
// ([reservations]; packaging/README.md, "The scheduler's plan").
type ReservationList struct {
	// Enabled: [reservations] command is set.
	Enabled bool `json:"enabled"`
	// Leader: this aggregator keeps them (the others list none; /healthz
	// names the leader).
	Leader       bool              `json:"leader"`
	Reservations []ReservationInfo `json:"reservations"`
	// Error is the last command that failed, until a round succeeds; the
	// scheduler's plan may be stale meanwhile.
	Error   string     `json:"error,omitempty"`
	ErrorAt *time.Time `json:"error_at,omitempty"`
}

// ReservationInfo is one reservation.
type ReservationInfo struct {
	Name string `json:"name"`
	// Nodes is a hostlist ("n[1-4]").
	Nodes string `json:"nodes"`
	Count int    `json:"count"`
	// End is when the scheduler plans the nodes free.
	End time.Time `json:"end"`
}

// Reservations returns what the reservation planner keeps, and whether
// reservations are enabled.
func (s *Service) Reservations() (reservation.Status, bool) {
	if s.plan == nil {
		return reservation.Status{}, false
	}
	return s.plan.Status(), true
}

func (s *Server) handleReservations(w http.ResponseWriter, r *http.Request) {
	st, enabled := s.svc.Reservations()
	out := ReservationList{Enabled: enabled, Leader: st.Leader, Reservations: []ReservationInfo{}, Error: st.Error}
	if !st.ErrorAt.IsZero() {
		out.ErrorAt = timePtr(st.ErrorAt.UTC())
	}
	for _, res := range st.Reservations {
		hl, err := Compress(res.Nodes)
		if err != nil {
			hl = ""
		}
		out.Reservations = append(out.Reservations, ReservationInfo{Name: res.Name, Nodes: hl, Count: len(res.Nodes), End: res.End.UTC()})
	}
	s.writeJSON(w, http.StatusOK, out)
}
