package metrics

import (
	"testing"

	"github.com/gracewatch/gracewatch/aggregator/view"
)

// A node is down by a grace violation when the central deadline put it
// down, or its agent reported an overdue teardown or a violation report; an
// administrator's drain is not one.
func TestGraceViolation(t *testing.T) {
	overdue := []view.Teardown{{Job: "7", Phase: "overdue"}}
	released := []view.Teardown{{Job: "7", Phase: "released"}}
	tests := []struct {
		name string
		n    view.Node
		want bool
	}{
		{"up", view.Node{State: view.StateUp}, false},
		{"teardown", view.Node{State: view.StateTeardown, Teardowns: []view.Teardown{{Phase: "teardown"}}}, false},
		{"central deadline", view.Node{State: view.StateDown, Reason: view.CentralDeadlineReason + "2026-12-03T08:00:00Z"}, true},
		{"agent, overdue", view.Node{State: view.StateDown, Reason: "job 7 teardown exceeded grace 2m0s", Teardowns: overdue}, true},
		{"agent, released, latched", view.Node{State: view.StateDown, Teardowns: released,
			LastReport: &view.Report{Job: "7", Stage: "after-escalation"}}, true},
		{"drain", view.Node{State: view.StateDown, Reason: "drained by root: disk", Teardowns: released}, false},
		{"drain with an on-demand report", view.Node{State: view.StateDown, LastReport: &view.Report{Stage: "on-demand"}}, false},
		{"unreachable", view.Node{State: view.StateUnreachable, Teardowns: overdue}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := graceViolation(tt.n); got != tt.want {
				t.Errorf("graceViolation = %v, want %v", got, tt.want)
			}
		})
	}
}
