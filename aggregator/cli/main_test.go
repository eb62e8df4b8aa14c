package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gracewatch/gracewatch/aggregator"
	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/mesh"
)

// binary is the aggregator built once for the whole package.
var binary string

const testTimeout = 20 * time.Second

func TestMain(m *testing.M) {
	dir, remove := testutil.ProgramsDir("aggregator")
	binary = filepath.Join(dir, "aggregator")
	// goleak.VerifyTestMain exits; clean up through a wrapper.
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	remove()
	os.Exit(code)
}

type result struct {
	code           int
	stdout, stderr string
}

// runCLI runs the built binary with args and env added to the environment.
func runCLI(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("%v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return result{code, out.String(), errb.String()}
}

func TestUsage(t *testing.T) {
	tests := []struct {
		args []string
		code int
		out  string // in stdout or stderr
	}{
		{nil, exitUsage, "usage: aggregator COMMAND"},
		{[]string{"bogus"}, exitUsage, `unknown command "bogus"`},
		{[]string{"help"}, exitOK, "commands:"},
		{[]string{"--help"}, exitOK, "commands:"},
		{[]string{"help", "drain"}, exitOK, "usage: aggregator drain NODE --reason TEXT"},
		{[]string{"help", "nope"}, exitUsage, "unknown command"},
		{[]string{"version"}, exitOK, "aggregator dev"},
		{[]string{"resume", "--reason", "x"}, exitUsage, "NODE is required"},
		{[]string{"resume", "n1"}, exitUsage, "--reason is required"},
		{[]string{"drain", "n1", "n2", "--reason", "x"}, exitUsage, `unexpected argument "n2"`},
		{[]string{"drain", "n1", "--reason", strings.Repeat("x", 300)}, exitUsage, "longer than 256"},
		{[]string{"nodes", "--state", "sleepy"}, exitUsage, `unknown state "sleepy"`},
		{[]string{"nodes", "--hostlist", "--json"}, exitUsage, "not both"},
		{[]string{"nodes", "--bogus"}, exitUsage, "flag provided but not defined"},
		{[]string{"keygen"}, exitUsage, "FILE is required"},
		{[]string{"serve", "extra"}, exitUsage, `unexpected argument "extra"`},
		{[]string{"nodes", "--url", "ftp://x"}, exitError, "want http://HOST:PORT"},
		{[]string{"nodes", "--url", "http://127.0.0.1:1"}, exitError, "connection refused"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := runCLI(t, nil, tt.args...)
			if r.code != tt.code || !strings.Contains(r.stdout+r.stderr, tt.out) {
				t.Errorf("exit %d, want %d with %q\nstdout: %s\nstderr: %s", r.code, tt.code, tt.out, r.stdout, r.stderr)
			}
		})
	}
}

func TestKeygen(t *testing.T) {
	p := filepath.Join(t.TempDir(), "mesh.key")
	if r := runCLI(t, nil, "keygen", p); r.code != 0 {
		t.Fatalf("keygen: %d %s", r.code, r.stderr)
	}
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	if r := runCLI(t, nil, "keygen", p); r.code != exitError || !strings.Contains(r.stderr, "refusing to overwrite") {
		t.Errorf("second keygen: %d %s", r.code, r.stderr)
	}
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

const token = "cli-test-token-0123456789"

func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "mesh.key")
	if r := runCLI(t, nil, "keygen", key); r.code != 0 {
		t.Fatalf("keygen: %+v", r)
	}
	site := filepath.Join(dir, "site.key")
	if r := runCLI(t, nil, "site-key", site); r.code != 0 || !strings.Contains(r.stdout, "every aggregator only") {
		t.Fatalf("site-key: %+v", r)
	}
	tokenFile := writeFile(t, filepath.Join(dir, "admin.token"), token+"\n", 0o600)
	good := writeFile(t, filepath.Join(dir, "good.toml"), fmt.Sprintf(`name = "agg-7"
[mesh]
keyring = %q
site_key_file = %q
[http]
admin_token_file = %q
[policy]
grace = "90s"
[[actuator]]
on = "down"
command = ["true", "{node}"]
`, key, site, tokenFile), 0o644)
	r := runCLI(t, nil, "config", "check", "--config", good)
	if r.code != 0 {
		t.Fatalf("config check of a good file: %+v", r)
	}
	printed := writeFile(t, filepath.Join(dir, "printed.toml"), r.stdout, 0o644)
	cfg, err := aggregator.LoadConfig(printed)
	if err != nil {
		t.Fatalf("printed configuration does not load: %v\n%s", err, r.stdout)
	}
	if cfg.Name != "agg-7" || cfg.Policy.Grace.D() != 90*time.Second || len(cfg.Actuators) != 1 || cfg.Mesh.Keyring != key {
		t.Fatalf("effective configuration %+v", cfg)
	}
	open := writeFile(t, filepath.Join(dir, "open.token"), token+"\n", 0o644)
	sameToken := writeFile(t, filepath.Join(dir, "same.token"), token+"\n", 0o640)
	siteText, _ := os.ReadFile(site)
	openSite := writeFile(t, filepath.Join(dir, "open-site.key"), string(siteText), 0o644)
	cases := []struct{ name, text, want string }{
		{"unknown key", "[policy]\ngrase = \"3s\"\n", `:2: key "policy.grase": unknown key`},
		{"no keyring", "name = \"a\"\n", "mesh.keyring"},
		{"readable token", fmt.Sprintf("[mesh]\nkeyring = %q\nallow_unsigned = true\n[http]\nadmin_token_file = %q\n", key, open), "http.admin_token_file"},
		{"readable read token", fmt.Sprintf("[mesh]\nkeyring = %q\nallow_unsigned = true\n[http]\nread_token_file = %q\n", key, open), `key "http.read_token_file": token file ` + open + ": mode 0644"},
		{"read token is the admin token", fmt.Sprintf("[mesh]\nkeyring = %q\nallow_unsigned = true\n[http]\nadmin_token_file = %q\nread_token_file = %q\n", key, tokenFile, sameToken),
			"holds the same token as http.admin_token_file"},
		{"readable site key", fmt.Sprintf("[mesh]\nkeyring = %q\nsite_key_file = %q\n", key, openSite), "mesh.site_key_file: site key file " + openSite + ": mode 0644 is too open"},
		{"no site key", fmt.Sprintf("[mesh]\nkeyring = %q\n", key), `key "mesh.site_key_file": required unless mesh.allow_unsigned = true`},
		{"node key on an aggregator", fmt.Sprintf("[mesh]\nkeyring = %q\nsite_key_file = %q\nnode_key_file = \"/etc/k\"\n", key, site), `key "mesh.node_key_file": is a node's key`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".toml"), tc.text, 0o644)
			r := runCLI(t, nil, "config", "check", "--config", p)
			if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q: want 1 and %q", r.code, r.stderr, tc.want)
			}
		})
	}
	// read_token with the admin token only: valid (older configurations),
	// with a warning that says what to set.
	compat := writeFile(t, filepath.Join(dir, "compat.toml"), fmt.Sprintf("[mesh]\nkeyring = %q\nsite_key_file = %q\n[http]\nadmin_token_file = %q\nread_token = true\n", key, site, tokenFile), 0o644)
	if r := runCLI(t, nil, "config", "check", "--config", compat); r.code != 0 ||
		!strings.Contains(r.stderr, `warning: `+compat+`: key "http.read_token": the read endpoints take the admin token only`) {
		t.Errorf("config check of read_token without read_token_file: %+v", r)
	}
	if r := runCLI(t, nil, "config", "show"); r.code != 2 {
		t.Fatalf("config show: %+v", r)
	}
}

// The provisioning commands print what the mesh checks with: node-key the
// key of that node under the primary site key, public-key one line per site
// key; the files they write load as the agent's key files.
func TestNodeKeyCommands(t *testing.T) {
	dir := t.TempDir()
	site, old := filepath.Join(dir, "site.key"), filepath.Join(dir, "old.key")
	for _, p := range []string{site, old} {
		if r := runCLI(t, nil, "site-key", p); r.code != 0 {
			t.Fatalf("site-key: %+v", r)
		}
	}
	if r := runCLI(t, nil, "site-key", site); r.code != exitError || !strings.Contains(r.stderr, "refusing to overwrite") {
		t.Errorf("second site-key: %+v", r)
	}
	// Rotation: the new key first, the old one second.
	a, _ := os.ReadFile(site)
	b, _ := os.ReadFile(old)
	both := writeFile(t, filepath.Join(dir, "both.key"), string(a)+string(b), 0o600)
	cfg := writeFile(t, filepath.Join(dir, "agg.toml"), fmt.Sprintf("[mesh]\ninsecure = true\nsite_key_file = %q\n", both), 0o644)

	r := runCLI(t, nil, "node-key", "node7", "--config", cfg)
	if r.code != 0 {
		t.Fatalf("node-key: %+v", r)
	}
	sites, err := mesh.LoadSiteKeys(both)
	if err != nil {
		t.Fatal(err)
	}
	if want := mesh.EncodeKey(mesh.NodeKey(sites[0], "node7")) + "\n"; r.stdout != want {
		t.Errorf("node-key printed %q, want the key under the primary site key %q", r.stdout, want)
	}
	out := filepath.Join(dir, "node7.key")
	if r := runCLI(t, nil, "node-key", "node7", "--out", out, "--config", cfg); r.code != 0 {
		t.Fatalf("node-key --out: %+v", r)
	}
	if k, err := mesh.LoadNodeKey(out); err != nil || mesh.EncodeKey(k)+"\n" != r.stdout {
		t.Errorf("written node key: %v", err)
	}
	if r := runCLI(t, nil, "node-key", "node[1-2]", "--config", cfg); r.code != exitError || !strings.Contains(r.stderr, "invalid node name") {
		t.Errorf("node-key of a host list: %+v", r)
	}

	r = runCLI(t, nil, "public-key", "--config", cfg)
	if r.code != 0 || strings.Count(r.stdout, "\n") != 2 {
		t.Fatalf("public-key: %+v", r)
	}
	pubs := writeFile(t, filepath.Join(dir, "aggregators.pub"), r.stdout, 0o644)
	keys, err := mesh.LoadAggregatorKeys(pubs)
	if err != nil || len(keys) != 2 {
		t.Fatalf("public keys: %v %v", keys, err)
	}
	agg, _ := mesh.AggregatorKeys(sites)
	if !keys[0].Equal(agg.PublicKeys()[0]) || !keys[1].Equal(agg.PublicKeys()[1]) {
		t.Error("printed public keys are not the site keys' signing keys")
	}

	noSite := writeFile(t, filepath.Join(dir, "nosite.toml"), "[mesh]\ninsecure = true\n", 0o644)
	if r := runCLI(t, nil, "public-key", "--config", noSite); r.code != exitError || !strings.Contains(r.stderr, "mesh.site_key_file is not set") {
		t.Errorf("public-key without a site key: %+v", r)
	}
}

func TestWriteReservations(t *testing.T) {
	at := time.Date(2026, 12, 4, 15, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		rl   api.ReservationList
		want string
	}{
		{"off", api.ReservationList{}, "reservations are off"},
		{"not the leader", api.ReservationList{Enabled: true}, "does not lead"},
		{"held", api.ReservationList{Enabled: true, Leader: true, Reservations: []api.ReservationInfo{
			{Name: "gracewatch_3fa9c2d1", Nodes: "n[1-4]", Count: 4, End: at}}},
			"gracewatch_3fa9c2d1  n[1-4]  4      2026-12-04T15:00:00Z"},
		{"failing", api.ReservationList{Enabled: true, Leader: true, Error: "scontrol: connection refused", ErrorAt: &at},
			"failing since 2026-12-04T15:00:00Z: scontrol: connection refused"},
	} {
		var b strings.Builder
		writeReservations(&b, tc.rl)
		if !strings.Contains(b.String(), tc.want) {
			t.Errorf("%s: printed\n%s\nwant %q in it", tc.name, b.String(), tc.want)
		}
	}
}
