package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/api"
)

func TestWriteIncidents(t *testing.T) {
	at := time.Date(2026, 12, 4, 15, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		il   api.IncidentList
		want []string
	}{
		{"none", api.IncidentList{}, []string{"drain limit: none", "no incidents"}},
		{"held", api.IncidentList{Leader: true, Limit: api.DrainLimit{Enabled: true, Limit: 3, Used: 3, Window: 600, KnownNodes: 30, Held: 19},
			Incidents: []api.Incident{{ID: 1, State: "open", Cause: "fuse.hangfs gracewatch-hangfs on /mnt/a", Nodes: "n[1-20]", Count: 20,
				HeldCount: 17, FirstSeen: at, Duration: 64}}},
			[]string{"drain limit: 3 of 30 nodes within 10m0s, 3 used, 19 held\n",
				"1   open   fuse.hangfs gracewatch-hangfs on /mnt/a  n[1-20]  20     0      17    2026-12-04T15:00:00Z  1m4s"}},
		{"not the leader", api.IncidentList{Limit: api.DrainLimit{Enabled: true, Limit: 5}}, []string{"does not lead"}},
		{"confirmed", api.IncidentList{Incidents: []api.Incident{{ID: 2, State: "open", Confirmed: true}}}, []string{"0 (confirmed)"}},
	} {
		var b strings.Builder
		writeIncidents(&b, tc.il)
		for _, want := range tc.want {
			if !strings.Contains(b.String(), want) {
				t.Errorf("%s: printed\n%s\nwant %q in it", tc.name, b.String(), want)
			}
		}
	}
}

func TestIncidentUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"incident", "confirm", "7"}, "--reason"},
		{[]string{"incident", "close", "7", "--reason", "x"}, `unknown incident subcommand "close"`},
		{[]string{"incident", "confirm", "x7", "--reason", "x"}, `incident id "x7": want a positive integer`},
		{[]string{"incident", "confirm", "0", "--reason", "x"}, `incident id "0"`},
	} {
		r := runCLI(t, nil, tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: %d %q, want usage error with %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}
