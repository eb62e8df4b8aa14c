package aggregator

import (
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParseConfig: whatever the bytes of aggregator.toml, parsing never
// panics, an error names the file, and an accepted configuration never has
// read_token without a token file nor the admin token file as the read one.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("name = \"agg-1\"\n[mesh]\ninsecure = true\n[policy]\ngrace = \"90s\"\n"))
	f.Add([]byte("[mesh]\ninsecure = true\n[[actuator]]\non = \"down\"\ncommand = [\"scontrol\", \"{node}\", \"{reason}\"]\ntimeout = \"5s\"\n"))
	f.Add([]byte("[[actuator]]\non = \"sideways\"\ncommand = []\n"))
	f.Add([]byte("[http]\nlisten = \"not an address\"\n"))
	f.Add([]byte("[mesh]\ninsecure = true\n[http]\nadmin_token_file = \"/a\"\nread_token_file = \"/r\"\nread_token = true\n"))
	f.Add([]byte("[mesh]\ninsecure = true\n[http]\nadmin_token_file = \"/a\"\nread_token_file = \"//a\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig("fuzz.toml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.toml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if h := cfg.HTTP; h.ReadToken && h.AdminTokenFile == "" && h.ReadTokenFile == "" ||
			h.ReadTokenFile != "" && h.AdminTokenFile != "" && filepath.Clean(h.ReadTokenFile) == filepath.Clean(h.AdminTokenFile) {
			t.Fatalf("accepted token files that guard nothing or are one: %+v", h)
		}
		for _, a := range cfg.Actuators {
			if len(a.Command) == 0 || (a.On != OnDown && a.On != OnUp) {
				t.Fatalf("accepted an invalid actuator: %+v", a)
			}
		}
	})
}
