package e2e

import (
	"regexp"
	"strings"
	"testing"
)

// incidentPrefix is the words the aggregator puts before a node's own
// reason in the scheduler's when the node belongs to a diagnosed incident
// (docs/DESIGN.md §5b): "incident 7 (lustre /scratch, 312 nodes): ".
var incidentPrefix = regexp.MustCompile(`^incident [0-9]+ \(([^()]*), [0-9]+ nodes?\): `)

// ownReason splits a scheduler's reason "gracewatch: incident N (cause,
// K nodes): REST" into "gracewatch: REST" and the cause; a reason without
// an incident comes back whole, with no cause. A reason that does not
// start with "gracewatch: " fails the test.
func ownReason(t testing.TB, reason string) (own, cause string) {
	t.Helper()
	rest, ok := strings.CutPrefix(reason, "gracewatch: ")
	if !ok {
		t.Fatalf("reason %q is not gracewatch's", reason)
	}
	m := incidentPrefix.FindStringSubmatch(rest)
	if m == nil {
		return reason, ""
	}
	return "gracewatch: " + rest[len(m[0]):], m[1]
}
