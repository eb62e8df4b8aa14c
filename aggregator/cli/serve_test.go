package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

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
		{"no keyring", "[http]\nlisten = \"127.0.0.1:0\"\n", `key "mesh.keyring": required`},
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
