package agent

import (
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// FuzzParseConfig: whatever the bytes of nodeagent.toml, parsing never
// panics, and an error names the file.
func FuzzParseConfig(f *testing.F) {
	testutil.FuzzConfig(f, []string{
		"node_name = \"n1\"\n[teardown]\ngrace = \"90s\"\nauto_resume = \"when-clean\"\n",
		"[mesh]\nenabled = true\njoin = [\"127.0.0.1:7946\"]\ninsecure = true\n[metrics]\nlisten = \"127.0.0.1:9470\"\n",
		"[api]\nallowed_uids = [0, -1]\n[diagnostics]\nmax_reports = 0\n",
		"[teardown]\ngrace = 9999999999999\n",
	}, ParseConfig, func(t *testing.T, cfg Config) {
		if cfg.Teardown.KillWait.D() <= 0 || cfg.Diagnostics.MaxReports < 1 {
			t.Fatalf("accepted an invalid configuration: %+v", cfg)
		}
	})
}
