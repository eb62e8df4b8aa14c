package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/api"
)

func TestWriteIncidents(t *testing.T) {
	at := time.Date(2026, 12, 4, 15, 0, 0, 0, time.UTC)
	until := at.Add(30 * time.Minute)
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
		{"confirmed", api.IncidentList{Incidents: []api.Incident{{ID: 2, State: "open", Confirmed: true,
			Confirmation: &api.Confirmation{At: at, Nodes: "n[6-8]", Count: 3}}}},
			[]string{"0 (confirmed)", "incident 2 confirmed at 2026-12-04T15:00:00Z: covers the drains of n[6-8] (3 nodes); nodes that join later are held past the limit\n"}},
		{"confirmed for a time", api.IncidentList{Incidents: []api.Incident{{ID: 3, State: "open", Confirmed: true,
			Confirmation: &api.Confirmation{At: at, Nodes: "n8", Count: 1, Until: &until}}}},
			[]string{"incident 3 confirmed at 2026-12-04T15:00:00Z: covers the drain of n8, and every drain of the incident until 2026-12-04T15:30:00Z\n"}},
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
		{[]string{"incident", "confirm", "7", "--reason", "x", "--for", "25h"}, `--for: want 0 (none) to 24h0m0s`},
		{[]string{"incident", "confirm", "7", "--reason", "x", "--for", "-1s"}, `--for: want 0 (none) to 24h0m0s`},
		{[]string{"incident", "confirm", "7", "--reason", "x", "--for", "1d"}, `invalid value "1d" for flag -for`},
	} {
		r := runCLI(t, nil, tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: %d %q, want usage error with %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

// `incident confirm --for` sends its duration in seconds and prints what
// the confirmation covers.
func TestIncidentConfirmFor(t *testing.T) {
	var body atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		body.Store(r.Method + " " + r.URL.Path + " " + string(b))
		until := time.Date(2026, 12, 4, 15, 30, 0, 0, time.UTC)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(api.IncidentConfirmation{ID: 7, Released: 3,
			Confirmation: api.Confirmation{At: until.Add(-30 * time.Minute), Nodes: "n[6-8]", Count: 3, Until: &until}})
	}))
	defer srv.Close()
	token := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(token, []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, nil, "incident", "confirm", "7", "--reason", "the FUSE server died", "--for", "30m", "--url", srv.URL, "--token-file", token)
	want := `POST /v1/incidents/7/confirm {"reason":"the FUSE server died","for":1800}`
	if got, _ := body.Load().(string); r.code != exitOK || strings.TrimSpace(got) != want {
		t.Fatalf("exit %d, request %q; want %q\n%s%s", r.code, got, want, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "incident 7 confirmed: 3 held drains let through; it covers the drains of n[6-8] (3 nodes), and every drain of the incident until 2026-12-04T15:30:00Z") {
		t.Errorf("printed %q", r.stdout)
	}
}
