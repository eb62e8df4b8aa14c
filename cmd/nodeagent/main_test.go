package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/mesh"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/agent/diagnose"
	"github.com/gracewatch/gracewatch/agent/request"
)

// binary is the nodeagent built once for the whole package, with the
// daemon nodeagentd beside it (as make build leaves them in bin/);
// lonely is a nodeagent alone in a folder, whose DaemonPath does not
// exist.
var binary, lonely string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gwcli")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "bin", "nodeagent")
	lonely = filepath.Join(dir, "lonely", "nodeagent")
	builds := [][]string{
		{"build", "-o", binary, "."},
		{"build", "-o", filepath.Join(dir, "bin", "nodeagentd"), "../nodeagentd"},
		{"build", "-ldflags", "-X github.com/gracewatch/gracewatch/agent/cli.DaemonPath=" + filepath.Join(dir, "none", "nodeagentd"),
			"-o", lonely, "."},
	}
	for _, args := range builds {
		if out, err := exec.Command(testutil.GoTool(), args...).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go %v: %v\n%s", args, err, out)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	code           int
	stdout, stderr string
}

// nodeagent runs the binary with args; env is added to an environment
// without GRACEWATCH_SOCKET.
func nodeagent(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary, args...)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, api.SocketEnv+"=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run nodeagent: %v", err)
	}
	return result{cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()}
}

func TestJobStart(t *testing.T) {
	inAnHour := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	rFile := filepath.Join(t.TempDir(), "R.json")
	r := fmt.Sprintf(`{"version":1,"execution":{"R_lite":[{"rank":"0","children":{"core":"0-3"}}],"starttime":%d,"expiration":%d.5,"nodelist":["node0"]}}`,
		inAnHour.Unix()-3600, inAnHour.Unix())
	if err := os.WriteFile(rFile, []byte(r), 0o644); err != nil {
		t.Fatal(err)
	}
	badR := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(badR, []byte(`{"version":2}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		svcErr     error
		args       []string
		wantCode   int
		wantStdout string // substring
		wantStderr string // substring
		wantReq    *request.JobStartRequest
	}{
		{name: "rfc3339", args: []string{"--job", "42", "--expiration", inAnHour.Format(time.RFC3339)},
			wantCode: 0, wantStdout: "job 42 registered: expires " + inAnHour.Local().Format(time.RFC3339) + ", grace 2m0s",
			wantReq: &request.JobStartRequest{Job: "42", Expiration: inAnHour.Format(time.RFC3339)}},
		{name: "flux R with grace and cgroup", args: []string{"--job", "ƒ42", "--R", rFile, "--grace", "90s", "--cgroup", "/sys/fs/cgroup/flux/x", "--json"},
			wantCode: 0, wantStdout: `"id": "ƒ42"`,
			wantReq: &request.JobStartRequest{Job: "ƒ42", Expiration: fmt.Sprintf("%d.5", inAnHour.Unix()), Grace: "90s", Cgroup: "/sys/fs/cgroup/flux/x"}},
		{name: "no expiration", args: []string{"--job", "42", "--expiration", "0"}, wantCode: 0, wantStdout: "no expiration",
			wantReq: &request.JobStartRequest{Job: "42", Expiration: "0"}},
		{name: "server refuses", svcErr: fmt.Errorf("job 42: %w", request.ErrDuplicateJob), args: []string{"--job", "42", "--expiration", "0"},
			wantCode: 1, wantStderr: "nodeagent: job 42: job already registered\n"},
		{name: "server input error", svcErr: &request.InputError{Field: "expiration", Msg: "too old"}, args: []string{"--job", "42", "--expiration", "0"},
			wantCode: 1, wantStderr: "nodeagent: expiration: too old\n"},
		{name: "missing job", args: []string{"--expiration", "0"}, wantCode: 2, wantStderr: "nodeagent job start: --job is required"},
		{name: "invalid job", args: []string{"--job", "a/b", "--expiration", "0"}, wantCode: 2, wantStderr: "--job: job id \"a/b\" contains '/'"},
		{name: "both expiration and R", args: []string{"--job", "42", "--expiration", "0", "--R", rFile}, wantCode: 2, wantStderr: "give one of --expiration and --R, not both"},
		{name: "neither", args: []string{"--job", "42"}, wantCode: 2, wantStderr: "--expiration or --R is required"},
		{name: "bad expiration", args: []string{"--job", "42", "--expiration", "soon"}, wantCode: 2, wantStderr: `--expiration: not a time: "soon"`},
		{name: "milliseconds", args: []string{"--job", "42", "--expiration", "1714568400000"}, wantCode: 2, wantStderr: "milliseconds given as seconds"},
		{name: "bad grace", args: []string{"--job", "42", "--expiration", "0", "--grace", "-1"}, wantCode: 2, wantStderr: "--grace: grace \"-1\" is negative"},
		{name: "missing R file", args: []string{"--job", "42", "--R", "/nonexistent/R.json"}, wantCode: 2, wantStderr: "--R: open /nonexistent/R.json"},
		{name: "bad R", args: []string{"--job", "42", "--R", badR}, wantCode: 2, wantStderr: "R: version: got 2"},
		{name: "unknown flag", args: []string{"--job", "42", "--bogus"}, wantCode: 2, wantStderr: "flag provided but not defined: -bogus"},
		{name: "extra argument", args: []string{"--job", "42", "--expiration", "0", "extra"}, wantCode: 2, wantStderr: `unexpected argument "extra"`},
		{name: "user", args: []string{"--job", "42", "--expiration", "0", "--user", "alice"}, wantCode: 0,
			wantReq: &request.JobStartRequest{Job: "42", Expiration: "0", User: "alice"}},
		// A hostile user name never costs the job its supervision: it
		// is dropped with a warning that says what was wrong and where.
		{name: "hostile user", args: []string{"--job", "42", "--expiration", "0", "--user", "root;reboot"}, wantCode: 0,
			wantStderr: `nodeagent: warning: --user: user name "root;reboot" has ';' at byte 4`,
			wantReq:    &request.JobStartRequest{Job: "42", Expiration: "0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := &fakeService{err: tt.svcErr, job: api.Job{Phase: api.PhaseRunning, Grace: "2m0s", Expiration: &inAnHour}}
			if tt.name == "no expiration" {
				svc.job.Expiration = nil
			}
			socket := serve(t, svc)
			args := append([]string{"job", "start", "--socket", socket}, tt.args...)
			res := nodeagent(t, nil, args...)
			if res.code != tt.wantCode {
				t.Fatalf("exit %d; want %d (stdout %q, stderr %q)", res.code, tt.wantCode, res.stdout, res.stderr)
			}
			if !strings.Contains(res.stdout, tt.wantStdout) || !strings.Contains(res.stderr, tt.wantStderr) {
				t.Errorf("stdout %q, stderr %q; want %q and %q", res.stdout, res.stderr, tt.wantStdout, tt.wantStderr)
			}
			if tt.wantCode == 2 && !strings.Contains(res.stderr, "usage: nodeagent job start") {
				t.Errorf("usage error without usage line: %q", res.stderr)
			}
			svc.mu.Lock()
			defer svc.mu.Unlock()
			checkCalled(t, svc.calls, tt.wantCode, svc.starts, tt.wantReq)
		})
	}
}

func TestJobUpdate(t *testing.T) {
	later := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Second)
	tests := []struct {
		name       string
		svcErr     error
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
		wantReq    *request.JobUpdateRequest
	}{
		{name: "extend", args: []string{"--job", "42", "--expiration", later.Format(time.RFC3339)}, wantCode: 0, wantStdout: "job 42 running: deadline",
			wantReq: &request.JobUpdateRequest{Expiration: later.Format(time.RFC3339)}},
		{name: "cgroup", args: []string{"--job", "42", "--cgroup", "freezer:/slurm/uid_0/job_42"}, wantCode: 0,
			wantReq: &request.JobUpdateRequest{Cgroup: "freezer:/slurm/uid_0/job_42"}},
		{name: "released", svcErr: fmt.Errorf("job 42: %w: it is released", request.ErrConflict), args: []string{"--job", "42", "--expiration", "0"},
			wantCode: 1, wantStderr: "nodeagent: job 42: conflict: it is released"},
		{name: "unknown", svcErr: fmt.Errorf("job 42: %w", request.ErrUnknownJob), args: []string{"--job", "42", "--expiration", "0"},
			wantCode: 1, wantStderr: "nodeagent: job 42: unknown job"},
		{name: "nothing", args: []string{"--job", "42"}, wantCode: 2, wantStderr: "give --expiration, --R, --cgroup or --user"},
		{name: "user", args: []string{"--job", "42", "--user", "bob"}, wantCode: 0, wantReq: &request.JobUpdateRequest{User: "bob"}},
		{name: "bad user alone", args: []string{"--job", "42", "--user", "b/b"}, wantCode: 2, wantStderr: `--user: user name "b/b" has '/' at byte 1`},
		{name: "bad user with a cgroup", args: []string{"--job", "42", "--cgroup", "0::/x", "--user", "b/b"}, wantCode: 0,
			wantStderr: "warning: --user", wantReq: &request.JobUpdateRequest{Cgroup: "0::/x"}},
		{name: "bad expiration", args: []string{"--job", "42", "--expiration", "tomorrow"}, wantCode: 2, wantStderr: `--expiration: not a time: "tomorrow"`},
		{name: "both", args: []string{"--job", "42", "--expiration", "0", "--R", "/x"}, wantCode: 2, wantStderr: "not both"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := &fakeService{err: tt.svcErr, job: api.Job{Phase: api.PhaseRunning, Grace: "2m0s", Deadline: &later}}
			socket := serve(t, svc)
			res := nodeagent(t, nil, append([]string{"job", "update", "--socket", socket}, tt.args...)...)
			if res.code != tt.wantCode || !strings.Contains(res.stdout, tt.wantStdout) || !strings.Contains(res.stderr, tt.wantStderr) {
				t.Fatalf("exit %d stdout %q stderr %q; want %d, %q, %q", res.code, res.stdout, res.stderr, tt.wantCode, tt.wantStdout, tt.wantStderr)
			}
			svc.mu.Lock()
			defer svc.mu.Unlock()
			checkCalled(t, svc.calls, tt.wantCode, svc.updates, tt.wantReq)
		})
	}
}

func TestNoAgent(t *testing.T) {
	res := nodeagent(t, nil, "status", "--socket", "/nonexistent/agent.sock")
	if res.code != 1 || !strings.HasPrefix(res.stderr, "nodeagent: agent at /nonexistent/agent.sock: ") {
		t.Fatalf("exit %d, stderr %q", res.code, res.stderr)
	}
}

func TestEpilog(t *testing.T) {
	svc := &fakeService{}
	socket := serve(t, svc)
	dir := t.TempDir()
	cmd := exec.Command(binary, "epilog", "--job", "7", "--", "sh", "-c", "echo out; echo err >&2; exit 7")
	cmd.Dir = dir
	cmd.Env = []string{api.SocketEnv + "=" + socket, "PATH=" + os.Getenv("PATH"), "GW_MARK=1"}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 7 {
		t.Fatalf("exit %v (%v); want 7; stderr %q", cmd.ProcessState, err, stderr.String())
	}
	if stdout.String() != "out\n" || stderr.String() != "err\n" {
		t.Errorf("stdout %q, stderr %q; want \"out\\n\" and \"err\\n\"", stdout.String(), stderr.String())
	}
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if len(svc.epilogs) != 1 {
		t.Fatalf("epilogs %+v", svc.epilogs)
	}
	got := svc.epilogs[0]
	if got.Dir != dir || !containsString(got.Env, "GW_MARK=1") || got.Argv[0] != "sh" || len(got.Argv) != 3 {
		t.Errorf("request %+v; want argv sh -c ..., the caller's environment and cwd %s", got, dir)
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestEpilogTimeout(t *testing.T) {
	svc := &fakeService{}
	socket := serve(t, svc)
	start := time.Now()
	res := nodeagent(t, nil, "epilog", "--socket", socket, "--job", "9", "--timeout", "300ms", "--", "sleep", "30")
	if res.code != 124 {
		t.Fatalf("exit %d; want 124 (stderr %q)", res.code, res.stderr)
	}
	if want := "nodeagent: epilog for job 9 still running after 300ms; the agent keeps supervising it\n"; res.stderr != want {
		t.Errorf("stderr %q; want %q", res.stderr, want)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("took %v", d)
	}
	select {
	case <-svc.ctxEnded:
	case <-time.After(10 * time.Second):
		t.Fatal("the service's context did not end after the wrapper left")
	}
}

func TestEpilogConnectionBroken(t *testing.T) {
	socket := serve(t, &fakeService{})
	res := nodeagent(t, nil, "epilog", "--socket", socket, "--job", "9", "--", "abort")
	if res.code != 1 {
		t.Fatalf("exit %d; want 1 (stderr %q)", res.code, res.stderr)
	}
	if res.stdout != "partial\n" || !strings.Contains(res.stderr, "nodeagent: epilog for job 9: connection to the agent broke") ||
		!strings.Contains(res.stderr, "the agent keeps supervising it") {
		t.Errorf("stdout %q, stderr %q", res.stdout, res.stderr)
	}
}

func TestEpilogUsage(t *testing.T) {
	tests := []struct {
		args       []string
		wantStderr string
	}{
		{[]string{"epilog", "--job", "9"}, "no command given"},
		{[]string{"epilog", "--", "true"}, "--job is required"},
		{[]string{"epilog", "--job", "9", "--timeout", "soon", "--", "true"}, `invalid value "soon" for flag -timeout`},
		{[]string{"epilog", "--job", "9", "--timeout", "-1s", "--", "true"}, "--timeout: -1s is negative"},
		{[]string{"epilog", "--job", "9", "--connect-wait", "-1s", "--", "true"}, "--connect-wait: -1s is negative"},
	}
	for _, tt := range tests {
		res := nodeagent(t, nil, tt.args...)
		if res.code != 2 || !strings.Contains(res.stderr, tt.wantStderr) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tt.args, res.code, res.stderr, tt.wantStderr)
		}
	}
}

func TestStatusDiagnoseResume(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	deadline := now.Add(90 * time.Second)
	svc := &fakeService{
		status: api.Status{Node: "node17", State: api.StateDown, Reason: "job 1234 teardown exceeded grace 120s", Since: now.Add(-time.Minute),
			Jobs: []api.Job{{ID: "1234", Phase: api.PhaseOverdue, Grace: "2m0s", Deadline: &deadline, Epilogs: 1, Escalation: "classified", Outcome: "hung"}},
			Hung: []api.Hung{{Job: "1234", PID: 5814, Comm: "cat", Class: "unkillable", State: "D", Wchan: "request_wait_answer"}}},
		reports: []*diagnose.Report{{Version: 1, Node: "node17", Job: "1234", Stage: diagnose.StageAfterEscalation, Taken: now,
			Grace: "2m0s", Outcome: diagnose.OutcomeHung, Summary: "job 1234 teardown exceeded grace 120s: 1 unkillable",
			Suggestions: []string{"abort the FUSE connection 42"},
			NodeContext: diagnose.NodeContext{Host: &diagnose.HostFacts{Load1: 3.5, Load5: 2.25, Load15: 1, MemTotalBytes: 24 << 30,
				MemAvailableBytes: 20 << 30, UptimeSeconds: 86400 + 3600, StateDirFreeBytes: 10 << 30, StateDirSizeBytes: 100 << 30}},
			Processes: []diagnose.Process{{PID: 5814, Comm: "cat", Class: diagnose.Unkillable, State: "D", Wchan: "request_wait_answer",
				NumThreads: 1, Cmdline: []string{"cat", "/scratch/x"},
				Files: []diagnose.File{{FD: "3", Target: "/scratch/x", FSType: "fuse", Mountpoint: "/scratch"}}}}}},
	}
	socket := serve(t, svc)
	env := []string{api.SocketEnv + "=" + socket}

	res := nodeagent(t, env, "status")
	for _, want := range []string{"node:     node17", "state:    down", "reason:   job 1234 teardown exceeded grace 120s",
		"ago)", "1234", "overdue", "classified", "hung processes:", "5814", "request_wait_answer"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("status output lacks %q:\n%s", want, res.stdout)
		}
	}
	res = nodeagent(t, env, "status", "--json")
	var st api.Status
	if err := json.Unmarshal([]byte(res.stdout), &st); err != nil || st.Node != "node17" || len(st.Hung) != 1 {
		t.Errorf("status --json: %v, %+v", err, st)
	}
	res = nodeagent(t, env, "diagnose", "--job", "1234")
	for _, want := range []string{"job 1234 on node17: after-escalation report", "summary:    job 1234 teardown exceeded grace 120s: 1 unkillable",
		"suggestion: abort the FUSE connection 42", "pid 5814 (cat): unkillable, state D in request_wait_answer, 1 threads: cat /scratch/x",
		"3 -> /scratch/x (fuse /scratch)",
		"node:       load 3.50 2.25 1.00, memory 20.0 GiB available of 24.0 GiB, up 1d1h0m0s, state dir 10.0 GiB free of 100.0 GiB"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("diagnose output lacks %q:\n%s", want, res.stdout)
		}
	}
	res = nodeagent(t, env, "diagnose", "--json")
	var reports []*diagnose.Report
	if err := json.Unmarshal([]byte(res.stdout), &reports); err != nil || len(reports) != 1 {
		t.Errorf("diagnose --json: %v, %q", err, res.stdout)
	}
	if res = nodeagent(t, env, "resume", "--reason", "NFS back"); res.code != 0 || !strings.Contains(res.stdout, "node node17 resumed") {
		t.Errorf("resume: %+v", res)
	}
	if res = nodeagent(t, env, "resume"); res.code != 2 || !strings.Contains(res.stderr, "--reason is required") {
		t.Errorf("resume without reason: %+v", res)
	}
	if res = nodeagent(t, env, "job", "end", "--job", "1234"); res.code != 0 || !strings.Contains(res.stdout, "job 1234") {
		t.Errorf("job end: %+v", res)
	}
}

// TestSocketFromConfig: without --socket and GRACEWATCH_SOCKET, the socket
// key of --config is used; a bad config file is an error naming it.
func TestSocketFromConfig(t *testing.T) {
	socket := serve(t, &fakeService{status: api.Status{Node: "n1", State: api.StateUp}})
	cfg := filepath.Join(t.TempDir(), "nodeagent.toml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("socket = %q\n", socket)), 0o644); err != nil {
		t.Fatal(err)
	}
	if res := nodeagent(t, nil, "status", "--config", cfg); res.code != 0 || !strings.Contains(res.stdout, "node:     n1") {
		t.Errorf("status --config: %+v", res)
	}
	// A client reads the socket key alone: a key it does not know (of a
	// newer agent, or a typo the running agent never read) does not fail
	// every job's epilog. serve and config check validate the whole file.
	other := filepath.Join(t.TempDir(), "other.toml")
	text := fmt.Sprintf("socket = %q\nfuture_key = 1\n[teardown]\ngrase = \"3s\"\n", socket)
	if err := os.WriteFile(other, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if res := nodeagent(t, nil, "status", "--config", other); res.code != 0 || !strings.Contains(res.stdout, "node:     n1") {
		t.Errorf("status with keys the client does not read: %+v", res)
	}
	// A file that is not TOML, or a socket that is not a string, fails
	// naming the file and line.
	for _, bad := range []string{"socket = \"/x\"\n[teardown\n", "\nsocket = 7\n"} {
		p := filepath.Join(t.TempDir(), "bad.toml")
		if err := os.WriteFile(p, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if res := nodeagent(t, nil, "status", "--config", p); res.code != 1 || !strings.Contains(res.stderr, p+":2") {
			t.Errorf("status with %q: %+v", bad, res)
		}
	}
}

// serve and config check re-execute nodeagentd; without it they say where
// they looked.
func TestDaemonMissing(t *testing.T) {
	for _, args := range [][]string{{"serve"}, {"config", "check"}} {
		cmd := exec.Command(lonely, args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		want := "nodeagent: the daemon nodeagentd is not installed: looked for " + filepath.Join(filepath.Dir(lonely), "nodeagentd") + " and "
		if cmd.ProcessState.ExitCode() != 1 || !strings.Contains(stderr.String(), want) {
			t.Errorf("%v: %v, stderr %q; want exit 1 and %q", args, err, stderr.String(), want)
		}
	}
	// Usage errors are the client's own: no daemon is needed to say them.
	cmd := exec.Command(lonely, "serve", "--socket", "relative.sock")
	if out, _ := cmd.CombinedOutput(); cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), "not an absolute path") {
		t.Errorf("serve --socket relative.sock alone: exit %d, %q", cmd.ProcessState.ExitCode(), out)
	}
	if out, err := exec.Command(lonely, "help", "serve").CombinedOutput(); err != nil || !strings.Contains(string(out), "usage: nodeagent serve") {
		t.Errorf("help serve alone: %v, %q", err, out)
	}
}

func TestHelpVersionUsage(t *testing.T) {
	tests := []struct {
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{[]string{"help"}, 0, "job start", ""},
		{[]string{"--help"}, 0, "diagnose", ""},
		{[]string{"help", "epilog"}, 0, "usage: nodeagent epilog --job ID [--timeout DUR] [--cgroup PATH] [--user USER] -- CMD [ARGS...]", ""},
		{[]string{"job", "start", "-h"}, 0, "-expiration", ""},
		{[]string{"version"}, 0, "nodeagent ", ""},
		{nil, 2, "", "usage: nodeagent COMMAND"},
		{[]string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{[]string{"job"}, 2, "", "job needs a subcommand"},
		{[]string{"job", "stop"}, 2, "", `unknown command "job stop"`},
		{[]string{"help", "nope"}, 2, "", `unknown command "nope"`},
		{[]string{"serve", "--socket", "relative.sock"}, 2, "", `--socket: "relative.sock" is not an absolute path`},
		{[]string{"serve", "--config", "/nonexistent/nodeagent.toml"}, 1, "", "nodeagent: read config: open /nonexistent/nodeagent.toml"},
	}
	for _, tt := range tests {
		res := nodeagent(t, nil, tt.args...)
		if res.code != tt.wantCode || !strings.Contains(res.stdout, tt.wantStdout) || !strings.Contains(res.stderr, tt.wantStderr) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %d, %q, %q", tt.args, res.code, res.stdout, res.stderr,
				tt.wantCode, tt.wantStdout, tt.wantStderr)
		}
	}
}

func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "mesh.key")
	if err := mesh.WriteKeyFile(key); err != nil {
		t.Fatal(err)
	}
	nodeKey, pubs := writeNodeKeys(t, dir, "n7")
	good := filepath.Join(dir, "good.toml")
	os.WriteFile(good, []byte(fmt.Sprintf(`node_name = "n7"
[teardown]
grace = "90"
[mesh]
enabled = true
join = ["127.0.0.1:7946"]
keyring = %q
node_key_file = %q
aggregator_keys_file = %q
`, key, nodeKey, pubs)), 0o600)
	r := nodeagent(t, nil, "config", "check", "--config", good)
	if r.code != 0 {
		t.Fatalf("config check of a good file: %d %s", r.code, r.stderr)
	}
	// The printed configuration is itself a valid file with the same values.
	printed := filepath.Join(dir, "printed.toml")
	os.WriteFile(printed, []byte(r.stdout), 0o600)
	cfg, err := agent.LoadConfig(printed)
	if err != nil {
		t.Fatalf("printed configuration does not load: %v\n%s", err, r.stdout)
	}
	if cfg.NodeName != "n7" || cfg.Teardown.Grace.D() != 90*time.Second || !cfg.Mesh.Enabled || cfg.Mesh.Keyring != key {
		t.Fatalf("effective configuration %+v", cfg)
	}

	cases := []struct{ name, text, want string }{
		{"unknown key", "[teardown]\ngrase = \"3s\"\n", `:2: key "teardown.grase": unknown key`},
		{"bad value", "[teardown]\nauto_resume = \"sometimes\"\n", `teardown.auto_resume`},
		{"world-readable key", fmt.Sprintf("[mesh]\nenabled = true\nallow_unsigned = true\nkeyring = %q\n", filepath.Join(dir, "open.key")), "mesh.keyring"},
		{"no node key", fmt.Sprintf("[mesh]\nenabled = true\nkeyring = %q\n", key), `key "mesh.node_key_file": required unless mesh.allow_unsigned = true`},
		{"world-readable node key", fmt.Sprintf("[mesh]\nenabled = true\nkeyring = %q\nnode_key_file = %q\naggregator_keys_file = %q\n", key, filepath.Join(dir, "open.key"), pubs), "mesh.node_key_file: node key file"},
		{"site key on a node", fmt.Sprintf("[mesh]\nenabled = true\nkeyring = %q\nnode_key_file = %q\naggregator_keys_file = %q\nsite_key_file = \"/etc/gracewatch/site.key\"\n", key, nodeKey, pubs), `key "mesh.site_key_file": is the aggregators' secret`},
	}
	os.WriteFile(filepath.Join(dir, "open.key"), []byte("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"), 0o644)
	os.Chmod(filepath.Join(dir, "open.key"), 0o644)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".toml")
			os.WriteFile(p, []byte(tc.text), 0o600)
			r := nodeagent(t, nil, "config", "check", "--config", p)
			if r.code != 1 || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, p) {
				t.Fatalf("exit %d, stderr %q: want 1 and %q naming the file", r.code, r.stderr, tc.want)
			}
		})
	}
}

// writeNodeKeys writes node's key and the aggregators' public keys (of a
// new site key) into dir, as an administrator provisions them.
func writeNodeKeys(t *testing.T, dir, node string) (nodeKey, pubs string) {
	t.Helper()
	site, err := mesh.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	agg, err := mesh.AggregatorKeys([][]byte{site})
	if err != nil {
		t.Fatal(err)
	}
	nodeKey, pubs = filepath.Join(dir, node+".key"), filepath.Join(dir, "aggregators.pub")
	if err := os.WriteFile(nodeKey, []byte(mesh.EncodeKey(mesh.NodeKey(site, node))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pubs, []byte(mesh.EncodeKey(agg.PublicKeys()[0])+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return nodeKey, pubs
}
