package aggregator

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/httpapi"
)

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "aggregator.toml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadConfigDefaults(t *testing.T) {
	p := writeConfig(t, "[mesh]\ninsecure = true\n")
	cfg, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	host, _, _ = strings.Cut(host, ".")
	if cfg.Name != "aggregator-"+host {
		t.Errorf("name = %q, want aggregator-%s", cfg.Name, host)
	}
	if cfg.HTTP.Listen != "127.0.0.1:8470" || cfg.HTTP.ReadToken || cfg.HTTP.MaxConnsPerSource != httpapi.DefaultMaxConnsPerSource {
		t.Errorf("http = %+v", cfg.HTTP)
	}
	if cfg.Policy.Grace.D() != 120*time.Second || cfg.Policy.ClockSkewAllowance.D() != 5*time.Second || cfg.Policy.UnreachableIsDown ||
		cfg.Policy.UnreachableAfter.D() != DefaultUnreachableAfter || cfg.Policy.Settle.D() != DefaultSettle {
		t.Errorf("policy = %+v", cfg.Policy)
	}
	if cfg.Mesh.Label != "gracewatch" {
		t.Errorf("mesh defaults lost: %+v", cfg.Mesh)
	}
}

func TestLoadConfigFull(t *testing.T) {
	p := writeConfig(t, `
name = "agg-1"
log_format = "json"

[mesh]
bind = "127.0.0.1:7946"
join = ["10.0.0.1:7946"]
keyring = "/etc/gracewatch/mesh.key"
site_key_file = "/etc/gracewatch/site.key"

[http]
listen = "0.0.0.0:8470"
admin_token_file = "/etc/gracewatch/admin.token"
read_token_file = "/etc/gracewatch/read.token"
read_token = true
max_conns_per_source = 128

[policy]
grace = "90s"
clock_skew_allowance = 2
unreachable_is_down = true
unreachable_after = "500ms"
settle = "1s"

[[actuator]]
on = "down"
command = ["scontrol", "update", "NodeName={node}", "State=DRAIN", "Reason=gracewatch: {reason}"]

[[actuator]]
on = "up"
command = ["scontrol", "update", "NodeName={node}", "State=RESUME"]
timeout = "10s"
retries = 0
`)
	cfg, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Name != "agg-1" || cfg.LogFormat != "json" || cfg.Mesh.Join[0] != "10.0.0.1:7946" {
		t.Errorf("cfg = %+v", cfg)
	}
	if h := cfg.HTTP; h.AdminTokenFile != "/etc/gracewatch/admin.token" || h.ReadTokenFile != "/etc/gracewatch/read.token" || !h.ReadToken || h.MaxConnsPerSource != 128 {
		t.Errorf("http = %+v", h)
	}
	if w := cfg.Warnings(); len(w) != 0 {
		t.Errorf("warnings with read_token_file: %q", w)
	}
	if cfg.Policy.Grace.D() != 90*time.Second || cfg.Policy.ClockSkewAllowance.D() != 2*time.Second || !cfg.Policy.UnreachableIsDown {
		t.Errorf("policy = %+v", cfg.Policy)
	}
	if len(cfg.Actuators) != 2 {
		t.Fatalf("actuators = %+v", cfg.Actuators)
	}
	down, up := cfg.Actuators[0], cfg.Actuators[1]
	if down.Timeout.D() != 30*time.Second || *down.Retries != 5 {
		t.Errorf("down defaults: timeout %v retries %d", down.Timeout.D(), *down.Retries)
	}
	if up.Timeout.D() != 10*time.Second || *up.Retries != 0 {
		t.Errorf("up: timeout %v retries %d", up.Timeout.D(), *up.Retries)
	}
	if p := cfg.ViewPolicy(); p.ClockSkewAllowance != 2*time.Second || !p.UnreachableIsDown || p.UnreachableAfter != 500*time.Millisecond ||
		p.Settle != time.Second {
		t.Errorf("ViewPolicy = %+v", p)
	}
}

func TestLoadConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		text string
		want []string // substrings of the error
	}{
		{"unknown key names file, line and key", "[mesh]\ninsecure = true\n[http]\nlisten = \"127.0.0.1:1\"\nlsiten = \"x\"\n",
			[]string{"aggregator.toml:5", `"http.lsiten"`, "unknown key"}},
		{"unknown key in an actuator", "[mesh]\ninsecure = true\n[[actuator]]\non = \"down\"\ncommand = [\"x\"]\nbogus = 1\n",
			[]string{":6", "actuator.bogus", "unknown key"}},
		{"bad duration", "[mesh]\ninsecure = true\n[policy]\ngrace = \"2 minutes\"\n",
			[]string{":4", `"policy.grace"`}},
		{"bad on", "[mesh]\ninsecure = true\n[[actuator]]\non = \"drain\"\ncommand = [\"x\"]\n",
			[]string{`"actuator[0].on"`, `"drain"`}},
		{"empty command", "[mesh]\ninsecure = true\n[[actuator]]\non = \"down\"\ncommand = []\n",
			[]string{`"actuator[0].command"`}},
		{"unknown placeholder", "[mesh]\ninsecure = true\n[[actuator]]\non = \"down\"\ncommand = [\"x\", \"{nodes}\"]\n",
			[]string{`"actuator[0].command"`, "{nodes}"}},
		{"retries out of range", "[mesh]\ninsecure = true\n[[actuator]]\non = \"down\"\ncommand = [\"x\"]\nretries = -1\n",
			[]string{`"actuator[0].retries"`}},
		{"up without down", "[mesh]\ninsecure = true\n[[actuator]]\non = \"up\"\ncommand = [\"x\"]\n",
			[]string{`"actuator"`, "there is none"}},
		{"tls halves", "[mesh]\ninsecure = true\n[http]\ntls_cert = \"/c\"\n", []string{`"http.tls_cert"`}},
		{"read_token without a token", "[mesh]\ninsecure = true\n[http]\nread_token = true\n", []string{`"http.read_token"`, "needs http.read_token_file"}},
		{"read token file is the admin one", "[mesh]\ninsecure = true\n[http]\nadmin_token_file = \"/etc/gracewatch/admin.token\"\nread_token_file = \"/etc/gracewatch/./admin.token\"\n",
			[]string{`"http.read_token_file"`, "must differ from the admin token"}},
		{"negative max_conns_per_source", "[mesh]\ninsecure = true\n[http]\nmax_conns_per_source = -1\n", []string{`"http.max_conns_per_source"`, "0 (the default, 64) to 1024"}},
		{"max_conns_per_source past max_conns", "[mesh]\ninsecure = true\n[http]\nmax_conns_per_source = 1025\n", []string{`"http.max_conns_per_source"`, "got 1025"}},
		{"bad listen", "[mesh]\ninsecure = true\n[http]\nlisten = \"8470\"\n", []string{`"http.listen"`}},
		{"negative allowance", "[mesh]\ninsecure = true\n[policy]\nclock_skew_allowance = \"-1s\"\n", []string{`"policy.clock_skew_allowance"`}},
		{"negative unreachable_after", "[mesh]\ninsecure = true\n[policy]\nunreachable_after = \"-1s\"\n", []string{`"policy.unreachable_after"`}},
		{"settle over an hour", "[mesh]\ninsecure = true\n[policy]\nsettle = \"2h\"\n", []string{`"policy.settle"`, "0 to 1h"}},
		{"mesh needs a keyring", "", []string{"mesh.keyring"}},
		{"log level", "log_level = \"loud\"\n[mesh]\ninsecure = true\n", []string{`"log_level"`}},
		{"mode", "mode = \"watch\"\n[mesh]\ninsecure = true\n", []string{`"mode"`, `"enforce" or "observe", got "watch"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadConfig(writeConfig(t, tt.text))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestReadTokenWarnings: read_token without read_token_file still works
// (configurations from before it) and says what it costs.
func TestReadTokenWarnings(t *testing.T) {
	for _, c := range []struct {
		name, http string
		warn       bool
	}{
		{"read_token with the admin token only", "admin_token_file = \"/a\"\nread_token = true\n", true},
		{"read_token with a read token", "admin_token_file = \"/a\"\nread_token_file = \"/r\"\nread_token = true\n", false},
		{"read token only", "read_token_file = \"/r\"\n", false},
		{"no read_token", "admin_token_file = \"/a\"\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := ParseConfig("a.toml", []byte("[mesh]\ninsecure = true\n[http]\n"+c.http))
			if err != nil {
				t.Fatal(err)
			}
			w := cfg.Warnings()
			if got := len(w) == 1 && strings.Contains(w[0], `key "http.read_token"`) && strings.Contains(w[0], "set http.read_token_file"); got != c.warn || (!c.warn && len(w) != 0) {
				t.Errorf("warnings %q, want a read_token warning: %v", w, c.warn)
			}
		})
	}
}

// TestDocumentedDefaults keeps testdata/aggregator.toml, the documented
// configuration, in agreement with DefaultConfig.
func TestDocumentedDefaults(t *testing.T) {
	cfg, err := LoadConfig("testdata/aggregator.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Mesh.Keyring = "/etc/gracewatch/mesh.key" // no default: the file shows where it goes
	want.Mesh.SiteKeyFile = "/etc/gracewatch/site.key"
	want.Mesh.Join = []string{}
	if err := want.Validate(); err != nil {
		t.Fatal(err)
	}
	if got, w := mustJSON(t, cfg), mustJSON(t, want); got != w {
		t.Errorf("testdata/aggregator.toml:\n%s\nDefaultConfig:\n%s", got, w)
	}
}
