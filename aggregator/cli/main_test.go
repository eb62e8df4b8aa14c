package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gracewatch/gracewatch/aggregator"
	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// binary is the aggregator built once for the whole package.
var binary string

const testTimeout = 20 * time.Second

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gwagg")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "aggregator")
	build := exec.Command(testutil.GoTool(), "build", "-o", binary, "github.com/gracewatch/gracewatch/cmd/aggregator")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	// goleak.VerifyTestMain exits; clean up through a wrapper.
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.RemoveAll(dir)
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

// testAgent is a real mesh member with role agent that answers Control
// messages the way a node agent does.
type testAgent struct {
	m    atomic.Pointer[mesh.Mesh]
	mu   sync.Mutex
	meta *gwpb.Meta
	wg   sync.WaitGroup
}

func (a *testAgent) HandleMessage(from string, env *gwpb.Envelope) {
	c := env.GetControl()
	if c == nil {
		return
	}
	// The mesh's callbacks must not call back into it.
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.mu.Lock()
		meta := &gwpb.Meta{Role: gwpb.Role_ROLE_AGENT, Incarnation: a.meta.Incarnation, Seq: a.meta.Seq + 1, SinceMs: time.Now().UnixMilli()}
		if c.GetAction() == gwpb.Action_ACTION_RESUME {
			meta.State = gwpb.State_STATE_UP
		} else {
			meta.State, meta.Reason = gwpb.State_STATE_DOWN, "drained: "+c.GetReason()
		}
		a.meta = meta
		a.mu.Unlock()
		m := a.m.Load()
		_ = m.SetMeta(meta)
		_ = m.Send(from, &gwpb.Envelope{Body: &gwpb.Envelope_Ack{Ack: &gwpb.ControlAck{Id: c.GetId(), Ok: true, Meta: meta}}})
	}()
}

func (a *testAgent) MemberChanged(mesh.Member) {}

func startAgent(t *testing.T, name string) *testAgent {
	t.Helper()
	a := &testAgent{meta: &gwpb.Meta{Role: gwpb.Role_ROLE_AGENT, Incarnation: 1, Seq: 1, State: gwpb.State_STATE_DOWN,
		Reason: "job 7 teardown exceeded grace 120s", SinceMs: time.Now().UnixMilli()}}
	cfg := mesh.DefaultConfig()
	cfg.Bind, cfg.Insecure = "127.0.0.1:0", true
	m, err := mesh.New(mesh.Options{Name: name, Role: gwpb.Role_ROLE_AGENT, Config: cfg, Meta: a.meta, Handler: a, Profile: "local"})
	if err != nil {
		t.Fatal(err)
	}
	a.m.Store(m)
	t.Cleanup(func() {
		a.wg.Wait()
		if err := m.Shutdown(); err != nil {
			t.Errorf("agent mesh shutdown: %v", err)
		}
	})
	return a
}

// server is a running `aggregator serve`.
type server struct {
	url    string
	cmd    *exec.Cmd
	stderr *testutil.SyncBuffer
	done   chan error
}

var listenRE = regexp.MustCompile(`listen=(127\.0\.0\.1:\d+)`)

// startServe runs `aggregator serve --config cfg` and returns once it
// listens.
func startServe(t *testing.T, cfg string) *server {
	t.Helper()
	s := &server{cmd: exec.Command(binary, "serve", "--config", cfg), stderr: &testutil.SyncBuffer{}, done: make(chan error, 1)}
	pr, pw := io.Pipe()
	s.cmd.Stderr = pw
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	copied := make(chan struct{})
	go func() {
		err := s.cmd.Wait()
		pw.Close()
		<-copied // every line of the log is in s.stderr before done
		s.done <- err
	}()
	found := make(chan string, 1)
	go func() {
		defer close(copied)
		defer io.Copy(io.Discard, pr) // past a line too long for the scanner
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			s.stderr.Write([]byte(line + "\n"))
			if m := listenRE.FindStringSubmatch(line); m != nil && strings.Contains(line, "msg=starting") {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		if s.cmd.ProcessState == nil {
			s.cmd.Process.Kill()
			<-s.done
		}
		if t.Failed() {
			t.Logf("aggregator's log:\n%s", s.stderr)
		}
	})
	select {
	case addr := <-found:
		s.url = "http://" + addr
	case err := <-s.done:
		s.done <- err
		t.Fatalf("serve exited: %v\n%s", err, s.stderr)
	case <-time.After(testTimeout):
		t.Fatalf("serve did not start\n%s", s.stderr)
	}
	return s
}

// stop sends SIGTERM and returns the exit code.
func (s *server) stop(t *testing.T) int {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	case <-time.After(testTimeout):
		t.Fatal("serve did not stop after SIGTERM")
	}
	return s.cmd.ProcessState.ExitCode()
}

// waitFor is testutil.Eventually with this package's timeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, testTimeout, what, cond)
}

func getJSON(url string, v any) int {
	hc := &http.Client{Timeout: 2 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_ = json.NewDecoder(resp.Body).Decode(v)
	return resp.StatusCode
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

// TestServeAndClients runs the real aggregator against a real mesh member
// acting as an agent, and the client commands against it.
func TestServeAndClients(t *testing.T) {
	agent := startAgent(t, "node1")
	dir := t.TempDir()
	tokenFile := writeFile(t, filepath.Join(dir, "admin.token"), token+"\n", 0o600)
	cfg := loopbackConfig(t, dir, "agg-test", agent.m.Load().Addr(), "log_level = \"debug\"\n", fmt.Sprintf(`admin_token_file = %q
[policy]
grace = "90s"
`, tokenFile))
	srv := startServe(t, cfg)

	waitFor(t, "node1 in the view", func() bool {
		var list api.NodeList
		return getJSON(srv.url+"/v1/nodes", &list) == 200 && len(list.Nodes) == 1
	})
	var rd api.Readiness
	if code := getJSON(srv.url+"/readyz", &rd); code != 200 || !rd.Insecure {
		t.Errorf("readyz: %d %+v", code, rd)
	}
	var cc api.ClusterConfig
	if getJSON(srv.url+"/v1/config", &cc); cc.Grace != 90 {
		t.Errorf("config: %+v", cc)
	}

	r := runCLI(t, nil, "nodes", "--url", srv.url)
	if r.code != 0 || !regexp.MustCompile(`node1\s+down\s+no\s+\S+\s+-\s+job 7 teardown exceeded grace 120s`).MatchString(r.stdout) {
		t.Errorf("nodes: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, []string{api.URLEnv + "=" + srv.url}, "nodes", "--hostlist", "--state", "down")
	if r.code != 0 || r.stdout != "node1\n" {
		t.Errorf("nodes --hostlist (URL from the environment): %d %q %s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, nil, "nodes", "--json", "--state", "up", "--url", srv.url)
	if r.code != 0 || !strings.Contains(r.stdout, `"nodes": []`) {
		t.Errorf("nodes --json --state up: %d %s", r.code, r.stdout)
	}

	r = runCLI(t, nil, "resume", "node1", "--reason", "fixed the NFS server", "--url", srv.url, "--token-file", tokenFile)
	if r.code != 0 || r.stdout != "node1 resumed: state up\n" {
		t.Errorf("resume: %d %q %s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, nil, "drain", "--reason", "maintenance", "--url", srv.url, "--token-file", tokenFile, "node1")
	if r.code != 0 || r.stdout != "node1 drained: state down (drained: maintenance)\n" {
		t.Errorf("drain: %d %q %s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, nil, "resume", "node1", "--reason", "x", "--url", srv.url, "--json", "--token-file", tokenFile)
	var n api.Node
	if err := json.Unmarshal([]byte(r.stdout), &n); r.code != 0 || err != nil || n.State != api.StateUp {
		t.Errorf("resume --json: %d %s %s", r.code, r.stdout, r.stderr)
	}

	r = runCLI(t, nil, "reservations", "--url", srv.url)
	if r.code != 0 || !strings.Contains(r.stdout, "reservations are off") {
		t.Errorf("reservations: %d %q %s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, nil, "incidents", "--url", srv.url)
	if r.code != 0 || !strings.Contains(r.stdout, "drain limit: 5 of 1 nodes within 10m0s") || !strings.Contains(r.stdout, "1   closed") {
		t.Errorf("incidents: %d %q %s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, nil, "incident", "confirm", "99", "--reason", "x", "--url", srv.url, "--token-file", tokenFile)
	if r.code != exitError || !strings.Contains(r.stderr, "unknown incident 99") {
		t.Errorf("incident confirm of an unknown incident: %d %q %s", r.code, r.stdout, r.stderr)
	}

	wrong := writeFile(t, filepath.Join(dir, "wrong.token"), "not-the-right-token-at-all", 0o600)
	r = runCLI(t, nil, "drain", "node1", "--reason", "x", "--url", srv.url, "--token-file", wrong)
	if r.code != exitError || !strings.Contains(r.stderr, "wrong bearer token (HTTP 401)") {
		t.Errorf("wrong token: %d %s", r.code, r.stderr)
	}
	r = runCLI(t, nil, "drain", "node9", "--reason", "x", "--url", srv.url, "--token-file", tokenFile)
	if r.code != exitError || !strings.Contains(r.stderr, `unknown node "node9" (HTTP 404)`) {
		t.Errorf("unknown node: %d %s", r.code, r.stderr)
	}

	if code := srv.stop(t); code != 0 {
		t.Errorf("serve exited %d after SIGTERM", code)
	}
	if log := srv.stderr.String(); !strings.Contains(log, "msg=stopped") {
		t.Errorf("no clean stop in the log:\n%s", log)
	}
}

func TestServeRefuses(t *testing.T) {
	dir := t.TempDir()
	open := writeFile(t, filepath.Join(dir, "open.token"), token, 0o644)
	tests := []struct {
		name, config, want string
	}{
		{"unknown key", "[mesh]\ninsecure = true\nbind = \"127.0.0.1:0\"\n[http]\nlisten = \"127.0.0.1:0\"\nlisen = 1\n",
			`aggregator.toml:6: key "http.lisen": unknown key`},
		{"world-readable token", fmt.Sprintf("[mesh]\ninsecure = true\nbind = \"127.0.0.1:0\"\n[http]\nlisten = \"127.0.0.1:0\"\nadmin_token_file = %q\n", open),
			"mode 0644 is too open (want 0600 or 0640"},
		{"no keyring", "[http]\nlisten = \"127.0.0.1:0\"\n", "mesh.keyring: required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := writeFile(t, filepath.Join(t.TempDir(), "aggregator.toml"), tt.config, 0o644)
			r := runCLI(t, nil, "serve", "--config", cfg)
			if r.code != exitError || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("exit %d, want 1 with %q\n%s", r.code, tt.want, r.stderr)
			}
		})
	}
}

// serve speaks sd_notify: READY, WATCHDOG pings through the service's main
// loop with a STATUS line, STOPPING at exit. The test plays systemd.
func TestServeSystemdNotify(t *testing.T) {
	sock, conn := testutil.ListenNotify(t)
	dir := filepath.Dir(sock)
	var mu sync.Mutex
	var got []string
	go func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := conn.ReadFromUnix(buf)
			if err != nil {
				return
			}
			mu.Lock()
			got = append(got, strings.Split(string(buf[:n]), "\n")...)
			mu.Unlock()
		}
	}()
	has := func(prefix string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range got {
			if strings.HasPrefix(m, prefix) {
				return true
			}
		}
		return false
	}
	cfg := loopbackConfig(t, dir, "agg-notify", "", "", "")
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_USEC", "300000")
	srv := startServe(t, cfg)
	waitFor(t, "READY=1", func() bool { return has("READY=1") })
	waitFor(t, "WATCHDOG=1", func() bool { return has("WATCHDOG=1") })
	waitFor(t, "a STATUS line", func() bool { return has("STATUS=0 nodes: 0 up, 0 teardown, 0 down, 0 unreachable") })
	if code := srv.stop(t); code != 0 {
		t.Fatalf("exit %d", code)
	}
	waitFor(t, "STOPPING=1", func() bool { return has("STOPPING=1") })
}

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
		{"no site key", fmt.Sprintf("[mesh]\nkeyring = %q\n", key), "mesh.site_key_file: required unless mesh.allow_unsigned = true"},
		{"node key on an aggregator", fmt.Sprintf("[mesh]\nkeyring = %q\nsite_key_file = %q\nnode_key_file = \"/etc/k\"\n", key, site), "mesh.node_key_file: is a node's key"},
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

// loopbackConfig writes dir/aggregator.toml of an aggregator name with an
// insecure mesh on loopback joining join (none if empty) and its HTTP on
// loopback, with top (top-level keys) and httpExtra (the [http] table's
// other keys and any tables after it) added, and returns its path.
func loopbackConfig(t *testing.T, dir, name, join, top, httpExtra string) string {
	t.Helper()
	joinLine := ""
	if join != "" {
		joinLine = fmt.Sprintf("join = [%q]\n", join)
	}
	return writeFile(t, filepath.Join(dir, "aggregator.toml"), fmt.Sprintf(`
name = %q
%s[mesh]
bind = "127.0.0.1:0"
%sinsecure = true
[http]
listen = "127.0.0.1:0"
%s`, name, top, joinLine, httpExtra), 0o644)
}
