package httpapi

import (
	"net/http"

	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/hostlist"
)

func (s *Server) handleReservations(w http.ResponseWriter, r *http.Request) {
	st, enabled := s.svc.Reservations()
	out := api.ReservationList{Enabled: enabled, Leader: st.Leader, Reservations: []api.ReservationInfo{}, Error: st.Error}
	if !st.ErrorAt.IsZero() {
		out.ErrorAt = wireTime(view.ServedTime(st.ErrorAt))
	}
	for _, res := range st.Reservations {
		hl, err := hostlist.Compress(res.Nodes)
		if err != nil {
			hl = ""
		}
		out.Reservations = append(out.Reservations, api.ReservationInfo{Name: res.Name, Nodes: hl, Count: len(res.Nodes), End: res.End.UTC()})
	}
	s.writeJSON(w, http.StatusOK, out)
}
