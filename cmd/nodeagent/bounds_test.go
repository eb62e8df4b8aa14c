package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
)

// TestGlobalFlagsBeforeTheCommand: the client flags may come before the
// command as well as after it; other flags there are refused with a clear
// error.
func TestGlobalFlagsBeforeTheCommand(t *testing.T) {
	now := time.Now().UTC()
	svc := &fakeService{status: api.Status{Node: "node17", State: api.StateUp, Since: now}}
	socket := serve(t, svc)
	for _, args := range [][]string{
		{"--socket", socket, "status"},
		{"--socket=" + socket, "status"},
		{"-socket", socket, "--connect-wait", "0s", "status", "--json"},
		{"status", "--socket", socket},
	} {
		res := nodeagent(t, nil, args...)
		if res.code != 0 || !strings.Contains(res.stdout, "node17") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want the status", args, res.code, res.stdout, res.stderr)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--json", "status"}, "flag --json before the command: only --socket, --config, --connect-wait may come first"},
		{[]string{"--socket"}, "flag --socket needs a value"},
		{[]string{"--socket", socket}, "a command is required after --socket"},
		{[]string{"--socket", socket, "version"}, "-socket"},
	} {
		res := nodeagent(t, nil, tc.args...)
		if res.code != 2 || !strings.Contains(res.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, res.code, res.stderr, tc.want)
		}
	}
}

// TestStatusShowsAStateFileError: the status of an agent that cannot write
// its state file says so, with the error.
func TestStatusShowsAStateFileError(t *testing.T) {
	now := time.Now().UTC()
	svc := &fakeService{status: api.Status{Node: "node17", State: api.StateUp, Since: now,
		StateFile: &api.StateFileError{Path: "/var/lib/gracewatch/state.json", Error: "write: no space left on device", Since: now.Add(-time.Minute), Failures: 12}}}
	socket := serve(t, svc)
	res := nodeagent(t, []string{api.SocketEnv + "=" + socket}, "status")
	for _, want := range []string{"WARNING:  state file /var/lib/gracewatch/state.json not written since", "12 failures", "no space left on device"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, res.stdout)
		}
	}
}

// TestConfigErrorsNameLineAndKey: every configuration error says the file,
// the line and the full dotted key.
func TestConfigErrorsNameLineAndKey(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, text, want string }{
		{"negative duration", "[teardown]\nkill_wait = \"-5s\"\n", `:2: key "teardown.kill_wait": must be positive`},
		{"negative grace", "node_name = \"n1\"\n[teardown]\ngrace = -5\n", `:3: key "teardown.grace": must not be negative`},
		{"duplicate key", "[teardown]\ngrace = 5\ngrace = 6\n", `:3: key "teardown.grace": toml: key grace is already defined`},
		{"keyring missing", "[mesh]\nenabled = true\nbind = \"127.0.0.1:0\"\n", `:1: key "mesh.keyring": required unless mesh.insecure = true`},
		{"keyring empty", "[mesh]\nenabled = true\nkeyring = \"\"\n", `:3: key "mesh.keyring": required`},
		{"keyring unreadable", "[mesh]\nenabled = true\nkeyring = \"/nonexistent/mesh.key\"\nallow_unsigned = true\n", `:3: key "mesh.keyring": key file: open /nonexistent/mesh.key`},
		{"join entry", "[mesh]\nenabled = true\ninsecure = true\njoin = [\"a:1\", \"b\"]\n", `:4: key "mesh.join[1]"`},
		{"mesh keys while disabled", "[mesh]\njoin = [\"aggr1:7946\"]\nkeyring = \"/etc/k\"\n",
			`:1: key "mesh.enabled": is false, but mesh.join, mesh.keyring are set: set enabled = true to join the mesh, or remove them`},
		{"mesh disabled explicitly", "[mesh]\nenabled = false\njoin = [\"aggr1:7946\"]\n", `:2: key "mesh.enabled": is false, but mesh.join is set`},
		{"node name", "node_name = \"n1,n2\"\n", `:1: key "node_name": invalid node name "n1,n2": ',' at byte 2`},
		{"output tail", "[teardown]\noutput_tail = \"1KiB\"\n", `:2: key "teardown.output_tail": must be between 4KiB and 1GiB`},
		{"socket group", "[api]\nsocket_group = \"no-such-group-gw\"\n", `:2: key "api.socket_group": group: unknown group no-such-group-gw`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".toml")
			if err := os.WriteFile(p, []byte(tc.text), 0o600); err != nil {
				t.Fatal(err)
			}
			r := nodeagent(t, nil, "config", "check", "--config", p)
			if r.code != 1 || !strings.Contains(r.stderr, p+tc.want) {
				t.Fatalf("exit %d, stderr %q: want 1 and %q", r.code, r.stderr, p+tc.want)
			}
		})
	}
}

// TestServeChecksBeforeItCreates: serve with a configuration that fails
// its checks creates neither the state dir nor the cgroup root.
func TestServeChecksBeforeItCreates(t *testing.T) {
	dir := t.TempDir()
	state, root := filepath.Join(dir, "state"), filepath.Join(dir, "cgroup-root")
	p := filepath.Join(dir, "nodeagent.toml")
	text := "state_dir = \"" + state + "\"\nsocket = \"" + filepath.Join(dir, "s.sock") + "\"\n[cgroup]\nroot = \"" + root +
		"\"\n[mesh]\nenabled = true\nkeyring = \"" + filepath.Join(dir, "missing.key") + "\"\nallow_unsigned = true\n"
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	r := nodeagent(t, nil, "serve", "--config", p)
	if r.code != 1 || !strings.Contains(r.stderr, p+`:7: key "mesh.keyring": key file: open`) {
		t.Fatalf("serve: exit %d, stderr %q; want 1 naming mesh.keyring at line 7", r.code, r.stderr)
	}
	for _, d := range []string{state, root} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s exists after a refused serve (%v)", d, err)
		}
	}
}
