package e2e

// Helpers of the Flux tests (flux_test.go): a Flux instance of fake nodes on
// this machine (`flux start --test-size=N` of flux-core and Fluxion built by
// scripts/flux-build.sh, after /work/shared/notes/flux-on-one-machine.md),
// its job and resource views, and the gracewatch wiring of
// packaging/examples around it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// fluxPrefix is where scripts/flux-build.sh installs Flux:
// $GRACEWATCH_FLUX_PREFIX (.ci/run sets it), else the script's default.
func fluxPrefix() (string, error) {
	if p := os.Getenv("GRACEWATCH_FLUX_PREFIX"); p != "" {
		return p, nil
	}
	out, err := exec.Command("bash", filepath.Join("..", "scripts", "flux-build.sh"), "--prefix").Output()
	if err != nil {
		return "", fmt.Errorf("scripts/flux-build.sh --prefix: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// requireFlux skips the test (fails it in CI) without root, /dev/fuse or a
// Flux installed in fluxPrefix, and returns that prefix.
func requireFlux(t testing.TB) string {
	t.Helper()
	testutil.RequireRoot(t)
	p, err := fluxPrefix()
	if err != nil {
		t.Fatal(err)
	}
	_, err = os.Stat(filepath.Join(p, "bin", "flux"))
	testutil.Require(t, err == nil, fmt.Sprintf("needs Flux in %s (scripts/flux-build.sh builds it; GRACEWATCH_FLUX_PREFIX names another prefix)", p))
	_, err = os.Stat("/dev/fuse")
	testutil.Require(t, err == nil, "needs /dev/fuse (the hung housekeeping reads a FUSE file)")
	return p
}

// fluxConfig is what changes between the tests' instances.
type fluxConfig struct {
	Size int
	// Agents is the folder of the agents' folders (cluster.dir, each agent's
	// socket is Agents/fakeN/a.sock); empty: Flux alone, housekeeping runs
	// the real housekeeping directly and there is no prolog.
	Agents string
	// PlanGrace, if set, loads the gracewatch jobtap plugin
	// (flux/jobtap, built by jobtapPlugin) with this G.
	PlanGrace time.Duration
}

// fluxSite is a Flux instance of Size brokers on this machine, rank N
// standing for the fake node "fakeN".
type fluxSite struct {
	t      testing.TB
	dir    string // config, scripts, logs; removed at the end
	prefix string
	uri    string // rank 0's FLUX_URI
	env    []string
	cmd    *exec.Cmd
	done   chan struct{}
	logs   *testutil.SyncBuffer
}

// startFlux writes the instance's configuration and scripts, starts
// `flux start --test-size=N` and waits (at most 60 s) until every node is
// free. The instance is shut down, and its folder removed, when the test
// ends.
func startFlux(t testing.TB, cfg fluxConfig) *fluxSite {
	t.Helper()
	prefix := requireFlux(t)
	dir := siteDir(t, "gw-flux-")
	s := &fluxSite{t: t, dir: dir, prefix: prefix, done: make(chan struct{}), logs: &testutil.SyncBuffer{}}
	t.Cleanup(s.stop) // before the folder's removal
	bin := filepath.Join(prefix, "bin")
	// PATH as the note says, with Flux first: the brokers, their prologs and
	// housekeeping, and the tests' flux commands find flux there.
	s.env = append(os.Environ(), "PATH="+bin+":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	s.env = withoutEnv(s.env, "FLUX_URI")

	conf := s.path("conf")
	if err := os.Mkdir(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	real := s.path("housekeeping.real")
	writeFluxTemplate(t, "housekeeping.real", real, 0o755, map[string]string{"Dir": dir, "Bin": bin})
	data := struct {
		Size                 int
		Last                 int
		Prolog, Housekeeping string
		Plugin, PluginGrace  string
	}{Size: cfg.Size, Last: cfg.Size - 1, Housekeeping: real}
	if cfg.PlanGrace > 0 {
		data.Plugin, data.PluginGrace = jobtapPlugin(t, prefix), fmt.Sprintf("%gs", cfg.PlanGrace.Seconds())
	}
	if cfg.Agents != "" {
		prolog := s.path("flux-prolog.sh")
		text := replaceOnce(t, readExample(t, "nodeagent/flux-prolog.sh"), "/usr/sbin/nodeagent", bins.nodeagent)
		if err := os.WriteFile(prolog, []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
		wrapper := s.path("flux-epilog.sh")
		text = readExample(t, "nodeagent/flux-epilog.sh")
		text = replaceOnce(t, text, "/usr/sbin/nodeagent", bins.nodeagent)
		text = replaceOnce(t, text, "/etc/flux/system/housekeeping.real", real)
		if err := os.WriteFile(wrapper, []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
		data.Prolog = s.path("prolog.sh")
		writeFluxTemplate(t, "prolog.sh", data.Prolog, 0o755, map[string]string{"Dir": dir, "Agents": cfg.Agents, "Script": prolog})
		data.Housekeeping = s.path("housekeeping.sh")
		writeFluxTemplate(t, "housekeeping.sh", data.Housekeeping, 0o755, map[string]string{"Agents": cfg.Agents, "Script": wrapper})
	}
	writeFluxTemplate(t, "instance.toml", filepath.Join(conf, "instance.toml"), 0o644, data)

	// The initial program publishes rank 0's URI and waits for the stop
	// file; when it exits, flux start shuts the instance down.
	initial := fmt.Sprintf(`echo "$FLUX_URI" >%[1]s/uri.tmp && mv %[1]s/uri.tmp %[1]s/uri; while [ ! -e %[1]s/stop ]; do sleep 0.1; done`, dir)
	s.cmd = exec.Command(filepath.Join(bin, "flux"), "start", fmt.Sprintf("--test-size=%d", cfg.Size), "-c", conf,
		"-o", "-Slog-filename="+s.path("broker.log"), "sh", "-c", initial)
	s.cmd.Env, s.cmd.Dir = s.env, dir
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	// Ended with the test binary rather than left running if it dies.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("flux start: %v", err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()

	const timeout = 2 * time.Minute
	started := time.Now()
	testutil.Poll(timeout, func() bool {
		if b, err := os.ReadFile(s.path("uri")); err == nil && len(b) > 0 {
			s.uri = strings.TrimSpace(string(b))
		}
		return s.uri != "" || s.exited()
	})
	if s.uri == "" {
		t.Fatalf("flux start: no URI after %v (exited: %v)\n%s", time.Since(started).Round(time.Second), s.exited(), s.logs)
	}
	s.env = append(s.env, "FLUX_URI="+s.uri)
	out, err, ok := testutil.PollRead(timeout-time.Since(started), func() (string, error) {
		return s.run("resource", "list", "-s", "free", "-n", "-o", "{nnodes}")
	}, func(out string) bool { return strings.TrimSpace(out) == strconv.Itoa(cfg.Size) })
	if !ok {
		t.Fatalf("flux: not %d free nodes within %v: %q %v\n%s", cfg.Size, timeout, out, err, s.logs)
	}
	return s
}

func withoutEnv(env []string, name string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

func (s *fluxSite) path(name string) string { return filepath.Join(s.dir, name) }

func (s *fluxSite) exited() bool { return testutil.Closed(s.done) }

// stop ends the initial program (the stop file), which shuts the instance
// down; after 20 s it sends flux start SIGTERM, after 30 s SIGKILL. The
// broker log is logged if the test failed.
func (s *fluxSite) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	os.WriteFile(s.path("stop"), nil, 0o644)
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		s.t.Errorf("flux start (pid %d) still running 20 s after its initial program was told to exit: SIGTERM", s.cmd.Process.Pid)
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			s.cmd.Process.Kill()
			<-s.done
		}
	}
	if s.t.Failed() {
		s.t.Logf("=== flux start:\n%s\n=== broker.log:\n%s", s.logs, tailFile(s.path("broker.log"), 12000))
	}
}

// writeFluxTemplate renders e2e/testdata/flux/<name>.tmpl to path.
func writeFluxTemplate(t testing.TB, name, path string, mode os.FileMode, data any) {
	t.Helper()
	tmpl, err := template.ParseFiles(filepath.Join("testdata", "flux", name+".tmpl"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := tmpl.Execute(f, data); err != nil {
		t.Fatal(err)
	}
}

// run runs a flux command against the instance (at most 15 s).
func (s *fluxSite) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(s.prefix, "bin", "flux"), args...)
	cmd.Env, cmd.Dir = s.env, s.dir
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		return string(out), fmt.Errorf("flux %s: %v: %s%s", strings.Join(args, " "), err, out, stderr)
	}
	return string(out), nil
}

// reloadFluxion unloads and loads Fluxion's modules as the instance's rc3
// and rc1 do: Fluxion then rebuilds its plan from the job manager's
// allocations.
func (s *fluxSite) reloadFluxion() {
	for _, args := range [][]string{
		{"module", "remove", "-f", "sched-fluxion-feasibility"},
		{"module", "remove", "-f", "sched-fluxion-qmanager"},
		{"module", "remove", "-f", "sched-fluxion-resource"},
		{"module", "load", "sched-fluxion-resource", "load-allowlist=node,core,gpu"},
		{"module", "load", "sched-fluxion-feasibility", "load-allowlist=node,core,gpu"},
		{"module", "load", "sched-fluxion-qmanager"},
	} {
		s.must(args...)
	}
}

func (s *fluxSite) must(args ...string) string {
	s.t.Helper()
	out, err := s.run(args...)
	if err != nil {
		s.t.Fatal(err)
	}
	return out
}

// fluxJob is a job in its two id forms: f58 as flux submit prints it (and
// the job-manager prolog sees it), decimal as housekeeping and the agent
// see it.
type fluxJob struct{ f58, dec string }

// submit runs `flux submit ARGS` and returns the job.
func (s *fluxSite) submit(args ...string) fluxJob {
	s.t.Helper()
	id := strings.TrimSpace(s.must(append([]string{"submit", "--output=/dev/null"}, args...)...))
	dec := strings.TrimSpace(s.must("job", "id", "--to=dec", id))
	if _, err := strconv.ParseUint(dec, 10, 64); err != nil {
		s.t.Fatalf("flux job id --to=dec %s printed %q", id, dec)
	}
	return fluxJob{f58: id, dec: dec}
}

// jobInfo is what flux jobs --json says of a job.
type jobInfo struct {
	State       string  `json:"state"`
	Nodelist    string  `json:"nodelist"`
	TSubmit     float64 `json:"t_submit"`
	TRun        float64 `json:"t_run"`
	TInactive   float64 `json:"t_inactive"`
	Expiration  float64 `json:"expiration"`
	Annotations struct {
		Sched struct {
			TEstimate *float64 `json:"t_estimate"`
			Reason    string   `json:"reason_pending"`
		} `json:"sched"`
	} `json:"annotations"`
}

func (s *fluxSite) job(j fluxJob) (jobInfo, error) {
	out, err := s.run("jobs", "--json", j.f58)
	if err != nil {
		return jobInfo{}, err
	}
	var info jobInfo
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		return jobInfo{}, fmt.Errorf("flux jobs --json %s: %v: %s", j.f58, err, out)
	}
	return info, nil
}

// waitJob polls the job (at most timeout) until cond holds.
func (s *fluxSite) waitJob(j fluxJob, what string, timeout time.Duration, cond func(jobInfo) bool) jobInfo {
	s.t.Helper()
	info, err, ok := testutil.PollRead(timeout, func() (jobInfo, error) { return s.job(j) }, cond)
	if !ok {
		s.t.Fatalf("flux: job %s not %s within %v (last: %+v, %v)", j.f58, what, timeout, info, err)
	}
	return info
}

// expiration is the job's R execution.expiration, as the prolog read it.
func (s *fluxSite) expiration(j fluxJob) float64 { return s.rExpiration(j) }

// rExpiration is the execution.expiration of the job's R as `flux job
// info [opts] JOBID R` prints it.
func (s *fluxSite) rExpiration(j fluxJob, opts ...string) float64 {
	s.t.Helper()
	var r struct {
		Execution struct {
			Expiration float64 `json:"expiration"`
		} `json:"execution"`
	}
	out := s.must(append(append([]string{"job", "info"}, opts...), j.f58, "R")...)
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		s.t.Fatalf("job info %s R of %s: %v: %s", strings.Join(opts, " "), j.f58, err, out)
	}
	return r.Execution.Expiration
}

// node is Flux's state of host as flux resource status prints it (avail,
// allocated, housekeeping, draining, drained) and its drain reason.
func (s *fluxSite) node(host string) (state, reason string, err error) {
	out, err := s.run("resource", "status", "-n", "-i", host, "-s", "allocated,housekeeping,draining,drained,avail", "-o", "{statex}|{nnodes}|{reason}")
	if err != nil {
		return "", "", err
	}
	// One line per state, with the number of nodes of host in it (0 or 1):
	// drained or draining win, then housekeeping, allocated, avail.
	in := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.SplitN(line, "|", 3)
		if len(f) == 3 && strings.TrimSpace(f[1]) != "0" {
			in[f[0]] = f[2]
		}
	}
	for _, st := range []string{"drained", "draining", "housekeeping", "allocated", "avail"} {
		if why, ok := in[st]; ok {
			return st, why, nil
		}
	}
	return "", "", fmt.Errorf("flux resource status: %s is in no state: %q", host, out)
}

// waitNode polls Flux (at most timeout) until cond holds.
func (s *fluxSite) waitNode(host, what string, timeout time.Duration, cond func(state, reason string) bool) (string, string) {
	s.t.Helper()
	last, ok, err := pollSchedNode(timeout, func() (string, string, error) { return s.node(host) }, cond)
	if !ok {
		s.t.Fatalf("flux: node %s not %s within %v (last: %q %q, %v)", host, what, timeout, last.state, last.reason, err)
	}
	return last.state, last.reason
}

func drainedState(state string) bool { return state == "draining" || state == "drained" }

// drainEvent is one "drain" event of the resource eventlog.
type drainEvent struct {
	At     time.Time
	Reason string
}

// drains lists the resource eventlog's drain events of rank (fakeN is
// rank N; the events name the brokers' real host names, not the fake
// ones).
func (s *fluxSite) drains(rank int) []drainEvent {
	s.t.Helper()
	out := s.must("resource", "eventlog", "--format=json")
	var evs []drainEvent
	for _, line := range strings.Split(out, "\n") {
		var ev struct {
			Timestamp float64 `json:"timestamp"`
			Name      string  `json:"name"`
			Context   struct {
				Idset  string `json:"idset"`
				Reason string `json:"reason"`
			} `json:"context"`
		}
		if json.Unmarshal([]byte(line), &ev) != nil || ev.Name != "drain" || ev.Context.Idset != strconv.Itoa(rank) {
			continue
		}
		evs = append(evs, drainEvent{At: time.Unix(0, int64(ev.Timestamp*1e9)), Reason: ev.Context.Reason})
	}
	return evs
}

// housekeeping sets what the real housekeeping does on host ("" for
// nothing). A script is set once host has no job and no housekeeping: the
// housekeeping of a job that just ended reads the file as it starts, after
// the job is inactive, and would otherwise run the next test's script (a
// hang that held fake0 from the next job: TestFluxGracePlan).
func (s *fluxSite) housekeeping(host, script string) {
	s.t.Helper()
	p := s.path("hk-" + host)
	if script != "" {
		s.waitNode(host, "without a job or a housekeeping", 2*time.Minute, func(st, _ string) bool {
			return st != "allocated" && st != "housekeeping"
		})
	}
	if script == "" {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			s.t.Fatal(err)
		}
		return
	}
	if err := os.WriteFile(p, []byte(script+"\n"), 0o644); err != nil {
		s.t.Fatal(err)
	}
}

// hkStart returns when the real housekeeping of job started on host,
// waiting at most timeout.
func (s *fluxSite) hkStart(j fluxJob, host string, timeout time.Duration) time.Time {
	s.t.Helper()
	at, err := waitStamp(s.path("hk-starts"), timeout, j.dec, host)
	if err != nil {
		s.t.Fatalf("the housekeeping of job %s did not start on %s within %v: %v\n%s", j.f58, host, timeout, err, tailFile(s.path("broker.log"), 3000))
	}
	return at
}

// nextFor returns the next /v1/watch event about node, whatever its state,
// or fails after timeout.
func (w *watcher) nextFor(t testing.TB, name string, timeout time.Duration) (node, event) {
	t.Helper()
	return w.nextWhere(t, "no event for "+name, timeout, func(n node) bool { return n.Name == name })
}

// configLoad runs `flux config load` with text (JSON) on its standard
// input and returns its combined output.
func (s *fluxSite) configLoad(text string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(s.prefix, "bin", "flux"), "config", "load")
	cmd.Env, cmd.Stdin = s.env, strings.NewReader(text)
	return cmd.CombinedOutput()
}
