package aggregator

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/actuate"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/config"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

type actFixture struct {
	*harness
	downLog, upLog string
}

func newActFixture(t *testing.T, retries int, opts ...func(*Options)) *actFixture {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join(dir, "act.sh")
	if err := os.WriteFile(script, []byte(testutil.LogScript), 0o755); err != nil {
		t.Fatal(err)
	}
	f := &actFixture{downLog: filepath.Join(dir, "down.log"), upLog: filepath.Join(dir, "up.log")}
	acts := []actuate.Config{
		{On: actuate.OnDown, Command: []string{script, f.downLog, "{node}", "{reason}"}, Timeout: config.Dur(10 * time.Second), Retries: &retries},
		{On: actuate.OnUp, Command: []string{script, f.upLog, "{node}", "{reason}"}, Timeout: config.Dur(10 * time.Second), Retries: &retries},
	}
	o := append([]func(*Options){func(o *Options) { o.Actuators = acts }}, opts...)
	f.harness = newHarness(t, o...)
	return f
}

// settle waits until the Service has processed its inputs and no actuator
// runs.
func (f *actFixture) settle() {
	f.t.Helper()
	f.sync()
	waitFor(f.t, "the actuators to finish", func() bool { return !f.svc.act.Busy() })
}

func (f *actFixture) want(downs, ups []string) {
	f.t.Helper()
	if got := testutil.ReadLines(f.t, f.downLog); strings.Join(got, "|") != strings.Join(downs, "|") {
		f.t.Errorf("on=down ran %q, want %q", got, downs)
	}
	if got := testutil.ReadLines(f.t, f.upLog); strings.Join(got, "|") != strings.Join(ups, "|") {
		f.t.Errorf("on=up ran %q, want %q", got, ups)
	}
}

// retryOnce waits for a back-off timer and lets it fire.
func (f *actFixture) retryOnce() {
	f.t.Helper()
	waitFor(f.t, "a back-off timer", func() bool { return f.clk.Pending() > 0 })
	f.clk.Advance(actuate.MaxBackoff)
}

func TestActuatorsOncePerTransition(t *testing.T) {
	f := newActFixture(t, 0)
	f.member("n1", upMeta(1, 1))
	f.settle()
	f.want(nil, nil) // up at first sight: nothing to undo

	f.member("n1", downMeta(1, 2, "job 7 hung"))
	f.settle()
	f.want([]string{"n1 job 7 hung"}, nil)

	// Changes within down (a new report, a newer seq) are no transition.
	f.update("n1", &gwpb.StateUpdate{Meta: downMeta(1, 3, "job 7 hung"), Reason: "job 7 hung: 1 unkillable"})
	f.status("n1", mesh.StatusSuspect)
	f.settle()
	f.want([]string{"n1 job 7 hung"}, nil)

	f.member("n1", upMeta(1, 4))
	f.settle()
	f.want([]string{"n1 job 7 hung"}, []string{"n1 "})

	f.member("n1", teardownMeta(1, 5, at(time.Hour)))
	f.member("n1", upMeta(1, 6))
	f.settle()
	f.want([]string{"n1 job 7 hung"}, []string{"n1 "})

	f.member("n1", downMeta(1, 7, "job 8 hung"))
	f.settle()
	f.member("n1", upMeta(1, 8))
	f.settle()
	f.want([]string{"n1 job 7 hung", "n1 job 8 hung"}, []string{"n1 ", "n1 "})
}

func TestActuatorsCentralDeadline(t *testing.T) {
	f := newActFixture(t, 0)
	f.member("n1", teardownMeta(1, 1, at(time.Minute)))
	f.settle()
	f.want(nil, nil)
	f.advance(time.Minute + 5*time.Second)
	f.settle()
	f.want([]string{"n1 no report after teardown deadline 2025-06-01T12:01:00.000Z"}, nil)
}

func TestActuatorsRetry(t *testing.T) {
	f := newActFixture(t, 2)
	if err := os.WriteFile(f.downLog+".fail", []byte("2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.member("n1", downMeta(1, 1, "hung"))
	f.retryOnce() // after the first failure
	f.retryOnce() // after the second
	f.settle()
	f.want([]string{"n1 hung"}, nil)
	f.member("n1", upMeta(1, 2))
	f.settle()
	f.want([]string{"n1 hung"}, []string{"n1 "})
}

func TestActuatorsGiveUpAndNeverUndrainWhatTheyDidNotDrain(t *testing.T) {
	f := newActFixture(t, 1)
	if err := os.WriteFile(f.downLog+".fail", []byte("2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.member("n1", downMeta(1, 1, "hung"))
	f.retryOnce()
	f.settle() // two attempts, both failed: given up
	f.want(nil, nil)
	f.member("n1", upMeta(1, 2))
	f.settle()
	f.want(nil, nil) // the drain failed: no undrain

	// The next transition into down tries again (and now succeeds).
	f.member("n1", downMeta(1, 3, "hung again"))
	f.settle()
	f.want([]string{"n1 hung again"}, nil)
}

func TestActuatorsOnlyTheLeaderRuns(t *testing.T) {
	f := newActFixture(t, 0)
	lower := mesh.Member{Name: "agg-0", Role: gwpb.Role_ROLE_AGGREGATOR, Status: mesh.StatusAlive, Meta: &gwpb.Meta{Role: gwpb.Role_ROLE_AGGREGATOR}}
	f.mesh.SetMember(lower)
	f.member("n1", upMeta(1, 1))
	f.member("n1", downMeta(1, 2, "hung"))
	f.member("n2", downMeta(1, 1, "hung"))
	f.member("n2", upMeta(1, 2))
	f.settle()
	f.want(nil, nil)
	if _, leader := f.svc.Aggregators(); leader != "agg-0" {
		t.Fatalf("leader = %q", leader)
	}

	// agg-0 dies: this one leads. agg-0 was alive and leading when n1 went
	// down, so the drain was its business: this one adopts n1 as drained
	// and does not run the commands a second time.
	lower.Status = mesh.StatusDead
	f.mesh.SetMember(lower)
	f.settle()
	f.want(nil, nil)

	// It does undrain n1 when n1 comes back, and actuates new transitions.
	f.member("n1", upMeta(1, 3))
	f.member("n2", downMeta(1, 3, "hung again"))
	f.settle()
	f.want([]string{"n2 hung again"}, []string{"n1 "})

	// agg-0 is back: this one stops; n2's resume is agg-0's business.
	lower.Status = mesh.StatusAlive
	f.mesh.SetMember(lower)
	f.member("n2", upMeta(1, 4))
	f.settle()
	f.want([]string{"n2 hung again"}, []string{"n1 "})
}

// A lone aggregator that starts with nodes already down cannot know that
// anyone drained them: it actuates them (the commands are idempotent).
func TestActuatorsLoneAggregatorActuatesWhatIsDown(t *testing.T) {
	f := newActFixture(t, 0)
	f.member("n1", downMeta(1, 2, "hung"))
	f.settle()
	f.want([]string{"n1 hung"}, nil)
}

func TestActuatorsWaitForTheJoin(t *testing.T) {
	f := newActFixture(t, 0)
	f.mesh.SetJoined(false)
	lower := mesh.Member{Name: "agg-0", Role: gwpb.Role_ROLE_AGGREGATOR, Status: mesh.StatusLeft}
	f.mesh.SetMember(lower) // a member event: leadership is re-evaluated
	f.member("n1", downMeta(1, 1, "hung"))
	f.settle()
	f.want(nil, nil)
	// The mesh joins; the re-check timer notices.
	f.mesh.SetJoined(true)
	f.advance(joinRecheck)
	f.settle()
	f.want([]string{"n1 hung"}, nil)
}

func TestActuatorTimeoutKillsTheProcessGroup(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	script := filepath.Join(dir, "hang.sh")
	// The script's child would outlive a kill of the script alone.
	if err := os.WriteFile(script, []byte("#!/bin/sh\nsleep 60 &\necho $! > \"$1\"\nwait\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	exit, _, err := actuate.RunCommand(t.Context(), []string{script, pidFile}, 300*time.Millisecond, "n1", actuate.OnDown, "r")
	if err == nil || !strings.Contains(err.Error(), "timed out after 300ms") || exit != -1 {
		t.Fatalf("runCommand = %d, %v; want a timeout", exit, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	waitFor(t, "the child to be killed", func() bool {
		return syscall.Kill(pid, 0) == syscall.ESRCH || isZombie(pid)
	})
}

// isZombie reports whether pid is a zombie (killed, waiting for init).
func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'Z'
}

func TestActuatorEnvironmentAndSubstitution(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	script := filepath.Join(dir, "env.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"$GRACEWATCH_NODE|$GRACEWATCH_TRANSITION|$1\" > \""+out+"\"\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	argv := actuate.ExpandArgv([]string{script, "Reason=gracewatch: {reason} on {node}"}, "n7", "line\nbreak")
	if _, _, err := actuate.RunCommand(t.Context(), argv, time.Second, "n7", actuate.OnDown, "line break"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out)
	if got := strings.TrimSpace(string(b)); got != "n7|down|Reason=gracewatch: line break on n7" {
		t.Errorf("got %q", got)
	}
	exit, output, err := actuate.RunCommand(t.Context(), []string{"/bin/sh", "-c", "echo oops >&2; exit 4"}, time.Second, "n", actuate.OnDown, "")
	if err == nil || exit != 4 || output != "oops" {
		t.Errorf("failing command: exit %d, output %q, err %v", exit, output, err)
	}
}

// A restarted aggregator with the lowest name takes over from a live peer
// that led meanwhile: the nodes already down were that peer's to drain, so
// it adopts them (and undrains them later) instead of draining them again.
func TestActuatorsRestartedLeaderAdoptsWhatIsDown(t *testing.T) {
	f := newActFixture(t, 0)
	f.mesh.SetJoined(false)
	higher := mesh.Member{Name: "zz-agg", Role: gwpb.Role_ROLE_AGGREGATOR, Status: mesh.StatusAlive, Meta: &gwpb.Meta{Role: gwpb.Role_ROLE_AGGREGATOR}}
	f.mesh.SetMember(higher)
	f.member("n1", downMeta(1, 1, "hung"))
	f.settle()
	f.mesh.SetJoined(true)
	f.advance(joinRecheck)
	f.settle()
	f.want(nil, nil)
	f.member("n1", upMeta(1, 2))
	f.settle()
	f.want(nil, []string{"n1 "})
}

// A restarted aggregator remembers what gracewatch drained: it undrains a
// node that recovered while it was away and does not drain again one that
// is still down. Without a state_dir it cannot.
func TestActuatorsRememberDrainsAcrossRestarts(t *testing.T) {
	state := t.TempDir()
	withState := func(o *Options) { o.StateDir = state }
	f1 := newActFixture(t, 0, withState)
	f1.member("n1", upMeta(1, 1))
	f1.member("n2", upMeta(1, 1))
	f1.member("n1", downMeta(1, 2, "hung"))
	f1.settle() // one at a time: each node's commands run on a goroutine of its own
	f1.member("n2", downMeta(1, 2, "hung"))
	f1.settle()
	f1.want([]string{"n1 hung", "n2 hung"}, nil)
	if names, _, err := actuate.LoadDrained(state); err != nil || strings.Join(names, ",") != "n1,n2" {
		t.Fatalf("drained.json: %v, %v; want n1 and n2", names, err)
	}

	// The restart: n1 recovered meanwhile, n2 is still down.
	f2 := newActFixture(t, 0, withState)
	f2.member("n1", upMeta(1, 3))
	f2.settle()
	f2.member("n2", downMeta(1, 2, "hung"))
	f2.settle()
	f2.want(nil, []string{"n1 "})
	if names, _, err := actuate.LoadDrained(state); err != nil || strings.Join(names, ",") != "n2" {
		t.Fatalf("drained.json after the undrain: %v, %v; want n2", names, err)
	}
	f2.member("n2", upMeta(1, 3))
	f2.settle()
	f2.want(nil, []string{"n1 ", "n2 "})

	// Memory only: the same restart leaves n1 drained.
	f3 := newActFixture(t, 0)
	f3.member("n1", upMeta(1, 3))
	f3.settle()
	f3.want(nil, nil)

	// A file that does not decode stops the start, naming it.
	if err := os.WriteFile(filepath.Join(state, actuate.DrainedFile), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	acts := []actuate.Config{{On: actuate.OnDown, Command: []string{"true"}, Timeout: config.Dur(time.Second)}}
	if _, err := New(Options{Name: "agg-1", Actuators: acts, StateDir: state}); err == nil || !strings.Contains(err.Error(), actuate.DrainedFile) {
		t.Fatalf("New with a bad %s: %v", actuate.DrainedFile, err)
	}
}

func withSettle(o *Options) { o.Policy.Settle = 3 * time.Second }

// A restarted aggregator can be handed a gossiped meta older than the
// agent's state: here a teardown whose deadline passed long ago, of an
// agent that was resumed since. Within settle it is neither served down
// nor actuated, and the agent's own state (up) arrives meanwhile: no
// command runs. With settle 0 this drains the node and undrains it.
func TestActuatorsSettleStaleGossip(t *testing.T) {
	f := newActFixture(t, 0, withSettle)
	f.member("n1", teardownMeta(1, 5, at(-time.Minute)))
	f.wantState("n1", view.StateTeardown)
	f.update("n1", &gwpb.StateUpdate{Meta: upMeta(1, 7)})
	f.wantState("n1", view.StateUp)
	f.advance(3 * time.Second)
	f.settle()
	f.want(nil, nil)
	f.wantState("n1", view.StateUp)

	// A later transition is actuated at once.
	f.update("n1", &gwpb.StateUpdate{Meta: downMeta(1, 8, "job 9 hung")})
	f.settle()
	f.want([]string{"n1 job 9 hung"}, nil)
}

// A merge delivers members in any order: a restarted leader can see a node
// down before it sees the other aggregator that led meanwhile and drained
// it. Held for settle, the node is decided once the peer is known: adopted
// as drained, not drained a second time, and undrained when it comes back.
// With settle 0 the restarted leader drains it again.
func TestActuatorsSettleKnowsThePeers(t *testing.T) {
	f := newActFixture(t, 0, withSettle)
	f.member("n3", downMeta(1, 4, "job 301 hung"))
	f.settle()
	higher := mesh.Member{Name: "zz-agg", Role: gwpb.Role_ROLE_AGGREGATOR, Status: mesh.StatusAlive, Meta: &gwpb.Meta{Role: gwpb.Role_ROLE_AGGREGATOR}}
	f.mesh.SetMember(higher)
	f.sync()
	f.advance(3 * time.Second)
	f.settle()
	f.want(nil, nil)
	f.member("n3", upMeta(1, 5))
	f.settle()
	f.want(nil, []string{"n3 "})
}

// Alone, a node first seen down is drained once settle has passed, and not
// before.
func TestActuatorsSettleLone(t *testing.T) {
	f := newActFixture(t, 0, withSettle)
	f.member("n1", downMeta(1, 2, "hung"))
	f.settle()
	f.want(nil, nil)
	f.advance(3*time.Second - time.Millisecond)
	f.settle()
	f.want(nil, nil)
	f.advance(time.Millisecond)
	f.settle()
	f.want([]string{"n1 hung"}, nil)
}

// The scheduler's reason follows the diagnosis (issue 12): a node that
// gracewatch drained gets each new reason through the on=reason actuators,
// at most once every ReasonEvery, the latest one winning; a node it did
// not drain never does.
func TestActuatorsReasonFollows(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "act.sh")
	if err := os.WriteFile(script, []byte(testutil.LogScript), 0o755); err != nil {
		t.Fatal(err)
	}
	downLog, upLog, reasonLog := filepath.Join(dir, "down.log"), filepath.Join(dir, "up.log"), filepath.Join(dir, "reason.log")
	zero := 0
	acts := []actuate.Config{
		{On: actuate.OnDown, Command: []string{script, downLog, "{node}", "{reason}"}, Retries: &zero},
		{On: actuate.OnUp, Command: []string{script, upLog, "{node}"}, Retries: &zero},
		{On: actuate.OnReason, Command: []string{script, reasonLog, "{node}", "{reason}"}, Retries: &zero},
	}
	f := &actFixture{downLog: downLog, upLog: upLog}
	f.harness = newHarness(t, func(o *Options) { o.Actuators = acts })
	f.member("n1", upMeta(1, 1))
	f.settle()
	f.member("n1", downMeta(1, 2, "job 7: 2 still running"))
	f.settle()
	f.want([]string{"n1 job 7: 2 still running"}, nil)
	if got := testutil.ReadLines(t, reasonLog); len(got) != 0 {
		t.Fatalf("on=reason ran %q with the drain's own reason", got)
	}
	// A new reason within ReasonEvery of the drain waits for it; a newer
	// one meanwhile replaces it: one run, with the latest.
	f.member("n1", downMeta(1, 3, "job 7: 1 unkillable"))
	f.sync()
	f.member("n1", downMeta(1, 4, "job 7: 1 unkillable, 1 zombie"))
	f.sync()
	if got := testutil.ReadLines(t, reasonLog); len(got) != 0 {
		t.Fatalf("on=reason ran %q before ReasonEvery passed", got)
	}
	waitFor(t, "the reason's wait", func() bool { return f.clk.Pending() > 0 })
	f.clk.Advance(actuate.ReasonEvery)
	f.settle()
	if got := testutil.ReadLines(t, reasonLog); strings.Join(got, "|") != "n1 job 7: 1 unkillable, 1 zombie" {
		t.Fatalf("on=reason ran %q, want once with the latest reason", got)
	}
	// Back up: undrained; no reason run for it.
	f.member("n1", upMeta(1, 5))
	f.settle()
	f.want([]string{"n1 job 7: 2 still running"}, []string{"n1"})

	// A node gracewatch did not drain (its on=down failed): no reason runs.
	os.WriteFile(downLog+".fail", []byte("1"), 0o644)
	f.member("n2", upMeta(1, 1))
	f.settle()
	f.member("n2", downMeta(1, 2, "job 9: hung"))
	f.settle()
	f.member("n2", downMeta(1, 3, "job 9: gone since 12:00:00Z, resume to clear"))
	f.settle()
	f.clk.Advance(actuate.ReasonEvery)
	f.settle()
	if got := testutil.ReadLines(t, reasonLog); len(got) != 1 {
		t.Fatalf("on=reason ran %q for a node gracewatch did not drain", got)
	}
}
