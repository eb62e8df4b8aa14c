package aggregator

import (
	"path/filepath"
	"testing"

	"github.com/gracewatch/gracewatch/aggregator/actuate"
	"github.com/gracewatch/gracewatch/aggregator/incident"
	"github.com/gracewatch/gracewatch/internal/testutil"
)

// FuzzParseConfig: whatever the bytes of aggregator.toml, parsing never
// panics, an error names the file, and an accepted configuration never has
// read_token without a token file nor the admin token file as the read one,
// nor an auto_resume_min_nodes that one compromised node could satisfy.
func FuzzParseConfig(f *testing.F) {
	testutil.FuzzConfig(f, []string{
		"name = \"agg-1\"\n[mesh]\ninsecure = true\n[policy]\ngrace = \"90s\"\n",
		"[mesh]\ninsecure = true\n[[actuator]]\non = \"down\"\ncommand = [\"scontrol\", \"{node}\", \"{reason}\"]\ntimeout = \"5s\"\n",
		"[[actuator]]\non = \"sideways\"\ncommand = []\n",
		"[http]\nlisten = \"not an address\"\n",
		"[mesh]\ninsecure = true\n[http]\nadmin_token_file = \"/a\"\nread_token_file = \"/r\"\nread_token = true\n",
		"[mesh]\ninsecure = true\n[http]\nadmin_token_file = \"/a\"\nread_token_file = \"//a\"\n",
		"[mesh]\ninsecure = true\n[incidents]\nauto_resume = true\nauto_resume_min_nodes = 2\n",
		"[mesh]\ninsecure = true\n[incidents]\nauto_resume = true\nauto_resume_min_nodes = 4\n",
	}, ParseConfig, func(t *testing.T, cfg Config) {
		if n := cfg.Incidents.AutoResumeMinNodes; n < incident.MinResumeNodes || n > incident.MaxGone {
			t.Fatalf("accepted auto_resume_min_nodes %d: one compromised node could resume another", n)
		}
		if h := cfg.HTTP; h.ReadToken && h.AdminTokenFile == "" && h.ReadTokenFile == "" ||
			h.ReadTokenFile != "" && h.AdminTokenFile != "" && filepath.Clean(h.ReadTokenFile) == filepath.Clean(h.AdminTokenFile) {
			t.Fatalf("accepted token files that guard nothing or are one: %+v", h)
		}
		for _, a := range cfg.Actuators {
			if len(a.Command) == 0 || (a.On != actuate.OnDown && a.On != actuate.OnUp) {
				t.Fatalf("accepted an invalid actuator: %+v", a)
			}
		}
	})
}
