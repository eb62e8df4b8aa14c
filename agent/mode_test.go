package agent

import (
	"strings"
	"testing"
)

// The mode key: its two values, and an error naming the key, the file and
// the line for any other.
func TestModeConfig(t *testing.T) {
	for _, tc := range []struct {
		text    string
		want    string // "" for an error
		wantErr []string
	}{
		{"node_name = \"n1\"\n", "enforce", nil},
		{"node_name = \"n1\"\nmode = \"observe\"\n", "observe", nil},
		{"node_name = \"n1\"\nmode = \"enforce\"\n", "enforce", nil},
		{"node_name = \"n1\"\nmode = \"Observe\"\n", "", []string{"nodeagent.toml:2", `key "mode"`, `must be "enforce" or "observe", got "Observe"`}},
		{"node_name = \"n1\"\nmode = 1\n", "", []string{"nodeagent.toml", "mode"}},
	} {
		t.Run(tc.text, func(t *testing.T) {
			cfg, err := ParseConfig("nodeagent.toml", []byte(tc.text))
			if tc.want != "" {
				if err != nil || cfg.Mode != tc.want {
					t.Fatalf("mode %q, err %v; want %q", cfg.Mode, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error for %q", tc.text)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
