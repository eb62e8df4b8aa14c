package aggregator

import "testing"

// A node is down by a grace violation when the central deadline put it
// down, or its agent reported an overdue teardown or a violation report; an
// administrator's drain is not one.
func TestGraceViolation(t *testing.T) {
	overdue := []Teardown{{Job: "7", Phase: "overdue"}}
	released := []Teardown{{Job: "7", Phase: "released"}}
	tests := []struct {
		name string
		n    Node
		want bool
	}{
		{"up", Node{State: StateUp}, false},
		{"teardown", Node{State: StateTeardown, Teardowns: []Teardown{{Phase: "teardown"}}}, false},
		{"central deadline", Node{State: StateDown, Reason: centralDeadlineReason + "2026-12-03T08:00:00Z"}, true},
		{"agent, overdue", Node{State: StateDown, Reason: "job 7 teardown exceeded grace 2m0s", Teardowns: overdue}, true},
		{"agent, released, latched", Node{State: StateDown, Teardowns: released,
			LastReport: &Report{Job: "7", Stage: "after-escalation"}}, true},
		{"drain", Node{State: StateDown, Reason: "drained by root: disk", Teardowns: released}, false},
		{"drain with an on-demand report", Node{State: StateDown, LastReport: &Report{Stage: "on-demand"}}, false},
		{"unreachable", Node{State: StateUnreachable, Teardowns: overdue}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := graceViolation(tt.n); got != tt.want {
				t.Errorf("graceViolation = %v, want %v", got, tt.want)
			}
		})
	}
}
