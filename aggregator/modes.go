package aggregator

// The modes at the Service (package aggregator/modes counts them): what
// /readyz says of them.

import (
	"fmt"

	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/internal/config"
)

// modeReadiness adds the modes to r and, when mixed, says so in the detail.
func (s *Service) modeReadiness(r *api.Readiness, detail *[]string) {
	own := s.modes.Own()
	var split string
	r.Mode = own
	r.NodeModes, r.ModesMixed, split = s.modes.State()
	if r.ModesMixed {
		*detail = append(*detail, fmt.Sprintf("mixed modes: this aggregator is in %s mode, the nodes' agents: %s", own, split))
	} else if own == config.ModeObserve {
		*detail = append(*detail, "observe mode: no actuator runs and no node is drained for a violation")
	}
}
