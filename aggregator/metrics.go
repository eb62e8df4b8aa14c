package aggregator

// The Service as its metrics' gauges read it (package aggregator/metrics
// owns the collectors; the counters are fed where things happen).

import (
	"github.com/gracewatch/gracewatch/aggregator/actuate"
	"github.com/gracewatch/gracewatch/aggregator/incident"
	aggmetrics "github.com/gracewatch/gracewatch/aggregator/metrics"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/mesh"
)

// metricsSource is s as the gauges read it at scrape time.
type metricsSource struct{ s *Service }

var _ aggmetrics.Source = metricsSource{}

// View implements aggmetrics.Source: the served nodes and the modes, read
// under one lock.
func (m metricsSource) View() aggmetrics.View {
	s := m.s
	nodeModes, mixed, _ := s.modes.State()
	s.mu.RLock()
	defer s.mu.RUnlock()
	nodes := make([]view.Node, 0, len(s.view))
	for _, n := range s.view {
		nodes = append(nodes, n)
	}
	return aggmetrics.View{Nodes: nodes, Watchers: s.watchers.LenLocked(), Lowest: s.leader == s.opts.Name,
		Mode: s.modes.Own(), NodeModes: nodeModes, Mixed: mixed}
}

// Mesh implements aggmetrics.Source.
func (m metricsSource) Mesh() (bool, []mesh.Member) {
	m.s.mu.RLock()
	msh := m.s.mesh
	m.s.mu.RUnlock()
	if msh == nil {
		return false, nil
	}
	return msh.Joined(), msh.Members()
}

// Incidents implements aggmetrics.Source.
func (m metricsSource) Incidents() ([]incident.Incident, actuate.LimitStatus) { return m.s.Incidents() }

// ClockSkewed implements aggmetrics.Source.
func (m metricsSource) ClockSkewed() int {
	return m.s.inc.SkewedCount()
}
