package agent

import (
	"strings"
	"testing"
)

// FuzzParseConfig: whatever the bytes of nodeagent.toml, parsing never
// panics, and an error names the file.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("node_name = \"n1\"\n[teardown]\ngrace = \"90s\"\nauto_resume = \"when-clean\"\n"))
	f.Add([]byte("[mesh]\nenabled = true\njoin = [\"127.0.0.1:7946\"]\ninsecure = true\n[metrics]\nlisten = \"127.0.0.1:9470\"\n"))
	f.Add([]byte("[api]\nallowed_uids = [0, -1]\n[diagnostics]\nmax_reports = 0\n"))
	f.Add([]byte("[teardown]\ngrace = 9999999999999\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig("fuzz.toml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.toml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if cfg.Teardown.KillWait.D() <= 0 || cfg.Diagnostics.MaxReports < 1 {
			t.Fatalf("accepted an invalid configuration: %+v", cfg)
		}
	})
}
