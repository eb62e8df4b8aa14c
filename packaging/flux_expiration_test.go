package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFluxExpirationScript: examples/nodeagent/flux-expiration.sh prints
// what `flux jobs -o {expiration}` says as the node agent reads it: Unix
// seconds, 0 for either scheduler's "no time limit", and fails (the agent
// keeps its deadline) on anything else. A `flux` on PATH stands in for
// Flux's answer; e2e TestFluxGracePlan runs the script against a real one.
func TestFluxExpirationScript(t *testing.T) {
	dir := t.TempDir()
	fake := "#!/bin/sh\n[ \"$1 $2 $3 $4\" = \"jobs -n -o {expiration}\" ] || { echo \"unexpected: $*\" >&2; exit 2; }\n[ \"$5\" = 42 ] || exit 1\nprintf '%s\\n' \"$FAKE_EXPIRATION\"\n"
	if err := os.WriteFile(filepath.Join(dir, "flux"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join("examples", "nodeagent", "flux-expiration.sh")
	for _, c := range []struct {
		flux, want string
		ok         bool
	}{
		{"1765091234.25", "1765091234.25", true},
		{"0.0", "0.0", true},
		{"9223372036.0", "0", true},
		{"9223372036", "0", true},
		{"", "", false},
		{"inf", "", false},
		{"1765091234.25 extra", "", false},
	} {
		cmd := exec.Command("sh", script, "42")
		cmd.Env = append(os.Environ(), "PATH="+dir+":/usr/bin:/bin", "FAKE_EXPIRATION="+c.flux)
		out, err := cmd.Output()
		if got := strings.TrimSpace(string(out)); (err == nil) != c.ok || (c.ok && got != c.want) {
			t.Errorf("flux says %q: printed %q (%v), want %q ok=%v", c.flux, got, err, c.want, c.ok)
		}
	}
	// A job Flux does not know: flux jobs fails, so does the script.
	cmd := exec.Command("sh", script, "7")
	cmd.Env = append(os.Environ(), "PATH="+dir+":/usr/bin:/bin")
	if out, err := cmd.Output(); err == nil {
		t.Errorf("an unknown job: printed %q and succeeded", out)
	}
}
