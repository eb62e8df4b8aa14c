package mesh

import (
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/config"
)

func TestConfigValidate(t *testing.T) {
	good := func() Config {
		c := DefaultConfig()
		c.Keyring = "/etc/gracewatch/mesh.key"
		return c
	}
	cases := []struct {
		name string
		mod  func(*Config)
		want []string // substrings of the error; none = valid
	}{
		{"defaults with a keyring", func(*Config) {}, nil},
		{"insecure without keyring", func(c *Config) { c.Keyring, c.Insecure = "", true }, nil},
		{"test setup", func(c *Config) {
			c.Bind, c.Advertise, c.Join = "127.0.0.1:0", "127.0.0.1:7000", []string{"127.0.0.1:7001", "agg-1.cluster:7946", "[::1]:7946"}
		}, nil},
		{"ipv6 bind", func(c *Config) { c.Bind = "[::]:7946" }, nil},
		{"rejoin off", func(c *Config) { c.RejoinInterval = config.Dur(0) }, nil},
		{"defaults need a keyring", func(c *Config) { c.Keyring = "" }, []string{`key "mesh.keyring": required unless mesh.insecure = true`}},
		{"keyring and insecure", func(c *Config) { c.Insecure = true }, []string{`key "mesh.insecure":`}},
		{"bind without port", func(c *Config) { c.Bind = "0.0.0.0" }, []string{`key "mesh.bind":`, "IP:port"}},
		{"bind host name", func(c *Config) { c.Bind = "localhost:7946" }, []string{`key "mesh.bind":`, "must be an IP"}},
		{"bind empty host", func(c *Config) { c.Bind = ":7946" }, []string{`key "mesh.bind":`}},
		{"bind bad port", func(c *Config) { c.Bind = "0.0.0.0:70000" }, []string{`key "mesh.bind":`, "bad port"}},
		{"advertise port 0", func(c *Config) { c.Advertise = "10.0.0.1:0" }, []string{`key "mesh.advertise":`, "port 0"}},
		{"advertise unspecified", func(c *Config) { c.Advertise = "0.0.0.0:7946" }, []string{`key "mesh.advertise":`, "not an address others can reach"}},
		{"advertise host name", func(c *Config) { c.Advertise = "node1:7946" }, []string{`key "mesh.advertise":`}},
		{"join without port", func(c *Config) { c.Join = []string{"10.0.0.1:7946", "agg-1"} }, []string{`key "mesh.join[1]":`}},
		{"join empty host", func(c *Config) { c.Join = []string{":7946"} }, []string{`key "mesh.join[0]":`, "empty host"}},
		{"empty label", func(c *Config) { c.Label = "" }, []string{`key "mesh.label":`}},
		{"long label", func(c *Config) { c.Label = strings.Repeat("x", 256) }, []string{`key "mesh.label":`, "256 bytes"}},
		{"negative rejoin", func(c *Config) { c.RejoinInterval = config.Dur(-time.Second) }, []string{`key "mesh.rejoin_interval":`}},
		{"tiny rejoin", func(c *Config) { c.RejoinInterval = config.Dur(time.Millisecond) }, []string{`key "mesh.rejoin_interval":`, "at least 100ms"}},
		{"several problems", func(c *Config) { c.Bind, c.Label, c.Keyring = "x", "", "" },
			[]string{`key "mesh.bind":`, `key "mesh.label":`, `key "mesh.keyring":`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := good()
			tc.mod(&c)
			err := c.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Errorf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil || !contains(err.Error(), tc.want...) {
				t.Errorf("Validate = %v, want %q", err, tc.want)
			}
		})
	}
}

// The [mesh] table decodes strictly through internal/config.
func TestConfigTOML(t *testing.T) {
	var v struct {
		Mesh Config `toml:"mesh"`
	}
	v.Mesh = DefaultConfig()
	err := config.Decode("x.toml", []byte(`[mesh]
bind = "10.0.0.5:7946"
join = ["10.0.0.1:7946", "10.0.0.2:7946"]
keyring = "/etc/gracewatch/mesh.key"
rejoin_interval = "1m"
`), &v)
	if err != nil {
		t.Fatal(err)
	}
	if v.Mesh.Bind != "10.0.0.5:7946" || len(v.Mesh.Join) != 2 || v.Mesh.RejoinInterval.D() != time.Minute ||
		v.Mesh.Label != DefaultLabel || v.Mesh.Validate() != nil {
		t.Errorf("decoded %+v", v.Mesh)
	}
	err = config.Decode("x.toml", []byte("[mesh]\nlabels = \"x\"\n"), &v)
	if err == nil || !strings.Contains(err.Error(), "mesh.labels") {
		t.Errorf("unknown key: %v", err)
	}
}
