package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/hostlist"
	"github.com/gracewatch/gracewatch/internal/replay"
	"github.com/gracewatch/gracewatch/internal/testutil/benchenv"
)

// replaySample is the harness's sampling interval of Slurm's node states
// and of the epilogues' notes: the resolution of the node-hours figures.
const replaySample = 250 * time.Millisecond

// runReplay runs one replay (run: alone, drain or plan) on a Slurm of its
// own and returns what it saw.
func runReplay(t *testing.T, cfg replayConfig, run string, jobs []replay.Job, model replay.Model) replay.Record {
	s := newSlurmNodes(t, cfg.nodes)
	for _, d := range []string{"td", "claim"} {
		if err := os.MkdirAll(s.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	real := s.path("epilog.real")
	writeTemplate(t, "epilog-replay.real", real, 0o755, map[string]string{"Dir": s.dir})
	conf := slurmNodesConfig{Nodes: cfg.nodes, BfResolution: 1}
	var c *cluster
	var agg *aggregator
	agents := map[string]*agent{}
	if run == "alone" {
		conf.Epilog = real
		conf.PrologEpilogTimeout = int(cfg.grace / time.Second)
	} else {
		t.Setenv("SLURM_CONF", s.conf)
		s.countCommands()
		c = newCluster(t)
		c.grace = cfg.grace.String()
		after := ""
		if run == "plan" {
			after = cfg.after
		}
		c.aggConf = s.slurmCommands(after)
		agg = c.addAggregator("agg-1")
		for _, n := range s.names {
			agents[n] = c.addAgent(n)
		}
		for _, n := range s.names {
			agg.waitNode(t, n, "up", 30*time.Second, func(nd node) bool { return nd.State == "up" })
		}
		conf.Epilog = s.path("epilog.sh")
		writeTemplate(t, "epilog-nodes.sh", conf.Epilog, 0o755, map[string]string{"AgentDir": c.dir, "Wrapper": s.writeEpilogWrapper(real)})
	}
	s.start(conf)
	t.Cleanup(s.endJobs)

	h := &replayHarness{t: t, s: s, cfg: cfg, run: run, agents: agents, c: c, agg: agg, job: map[string]int{}, td: map[string]int{},
		state: map[string]int{}, drain: map[string]int{}}
	h.rec = replay.Record{Run: run, Nodes: s.names, Tau: time.Duration(10 / cfg.compression * float64(time.Second))}
	begin := time.Now()
	h.rec.Begin = begin
	next := 0
	var samples int
	var maxGap time.Duration
	prev := begin
	for {
		now := time.Now()
		samples++
		maxGap = max(maxGap, now.Sub(prev))
		prev = now
		for next < len(jobs) && now.Sub(begin) >= jobs[next].Submit {
			h.submit(jobs[next], model, now)
			next++
		}
		h.readNotes()
		h.sampleNodes()
		h.repair()
		if next == len(jobs) && h.settled() {
			break
		}
		if time.Since(begin) > cfg.horizon {
			t.Errorf("%s: cut at the horizon %v: %d of %d jobs submitted", run, cfg.horizon, next, len(jobs))
			break
		}
		time.Sleep(replaySample) // not a wait: the replay's sampling interval
	}
	h.rec.End = time.Now()
	for _, i := range h.state {
		h.rec.States[i].To = h.rec.End
	}
	h.rec.Commands, h.rec.Writes, h.rec.Reservations = s.commandCounts()
	// A machine that is the bottleneck shows here first: the sampling
	// falls behind its interval.
	t.Logf("%s: %d samples over %v, the longest gap %v (interval %v); load average %s", run, samples,
		h.rec.End.Sub(begin).Round(time.Second), maxGap.Round(time.Millisecond), replaySample, benchenv.LoadAvg())
	return h.rec
}

// replayHarness is one run's bookkeeping.
type replayHarness struct {
	t      *testing.T
	s      *slurmNodes
	cfg    replayConfig
	run    string
	agents map[string]*agent
	c      *cluster
	agg    *aggregator
	rec    replay.Record
	job    map[string]int // Slurm job id -> index in rec.Jobs
	td     map[string]int // "job node" -> index in rec.Teardowns
	state  map[string]int // node -> index in rec.States of its current state
	drain  map[string]int // node -> index in rec.Drains while drained
	// repaired is the drains (by index) already cleared and resumed.
	repaired map[int]bool
}

// submit submits j and writes its nodes' drawn teardowns where its
// epilogues read them.
func (h *replayHarness) submit(j replay.Job, model replay.Model, now time.Time) {
	s := h.s
	wrap := fmt.Sprintf(`echo "$SLURM_JOB_ID $(date +%%s.%%N) $SLURM_JOB_NODELIST" >>%s; sleep %.3f`, s.path("job-starts"), j.Run.Seconds())
	id := s.submit("-N", strconv.Itoa(j.Nodes), "-t", strconv.Itoa(j.LimitMinutes), "-J", fmt.Sprintf("r%d", j.TraceID), "--wrap", wrap)
	var b strings.Builder
	for rank := range j.Nodes {
		td := model.Teardown(j.TraceID, rank)
		fmt.Fprintf(&b, "%s %.3f\n", td.Kind, td.Duration.Seconds())
	}
	tmp := s.path("td/." + id)
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Rename(tmp, s.path("td/"+id)); err != nil {
		h.t.Fatal(err)
	}
	h.job[id] = len(h.rec.Jobs)
	h.rec.Jobs = append(h.rec.Jobs, replay.JobRecord{TraceID: j.TraceID, ID: id, Submit: now})
}

// readNotes reads the jobs' and epilogues' notes: job starts and nodes,
// teardown starts (a job's end is its first epilogue's start), kinds and
// ends, and each hung teardown's D (the agent's; E + G under Slurm alone).
func (h *replayHarness) readNotes() {
	t, s := h.t, h.s
	for _, f := range noteLines(s.path("job-starts")) {
		i, ok := h.job[f[0]]
		if !ok || len(f) != 3 || !h.rec.Jobs[i].Start.IsZero() {
			continue
		}
		nodes, err := hostlist.Expand(f[2])
		if err != nil {
			t.Fatalf("job %s's node list %q: %v", f[0], f[2], err)
		}
		h.rec.Jobs[i].Start, h.rec.Jobs[i].Nodes = noteTime(t, f[1]), nodes
	}
	for _, f := range noteLines(s.path("epilog-starts")) {
		key := f[0] + " " + f[1]
		if _, seen := h.td[key]; seen || len(f) != 5 {
			continue
		}
		if f[4] == "missing" {
			t.Fatalf("job %s's epilogue on %s found no teardown drawn for it", f[0], f[1])
		}
		td := replay.TeardownRecord{Job: f[0], Node: f[1], Kind: replay.Kind(f[4]), Start: noteTime(t, f[2])}
		if i, ok := h.job[f[0]]; ok && (h.rec.Jobs[i].End.IsZero() || td.Start.Before(h.rec.Jobs[i].End)) {
			h.rec.Jobs[i].End = td.Start
		}
		if td.Kind == replay.Hung {
			td.D = td.Start.Add(h.cfg.grace)
			if a := h.agents[td.Node]; a != nil {
				td.D = h.deadline(a, td.Job, td.D)
			}
		}
		h.td[key] = len(h.rec.Teardowns)
		h.rec.Teardowns = append(h.rec.Teardowns, td)
	}
	for _, f := range noteLines(s.path("epilog-ends")) {
		if i, ok := h.td[f[0]+" "+f[1]]; ok && len(f) == 4 && h.rec.Teardowns[i].End.IsZero() {
			h.rec.Teardowns[i].End = noteTime(t, f[2])
		}
	}
}

// deadline is the agent's D of job, or def if the agent no longer holds
// the job (its teardown ended).
func (h *replayHarness) deadline(a *agent, job string, def time.Time) time.Time {
	for _, j := range a.status().Jobs {
		if j.ID == job && j.Deadline != nil {
			return *j.Deadline
		}
	}
	h.t.Logf("agent %s holds no deadline of job %s: D taken as its epilogue's start + G", a.node, job)
	return def
}

// sampleNodes samples every node's Slurm state and drain reason.
func (h *replayHarness) sampleNodes() {
	out, err := h.s.run("sinfo", "-h", "-N", "-o", "%N|%T|%H|%E")
	now := time.Now()
	if err != nil {
		h.t.Logf("sinfo: %v", err)
		return
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.SplitN(line, "|", 4)
		if len(f) != 4 {
			continue
		}
		node, state, stamp, reason := f[0], f[1], f[2], f[3]
		if i, ok := h.state[node]; ok && h.rec.States[i].State == state {
			h.rec.States[i].To = now
		} else {
			if ok {
				h.rec.States[i].To = now
			}
			h.state[node] = len(h.rec.States)
			h.rec.States = append(h.rec.States, replay.StateInterval{Node: node, State: state, From: now, To: now})
		}
		drained := strings.HasPrefix(state, "drain")
		i, was := h.drain[node]
		switch {
		case drained && !was:
			h.drain[node] = len(h.rec.Drains)
			h.rec.Drains = append(h.rec.Drains, replay.DrainRecord{Node: node, Reason: reason, At: now})
			i = h.drain[node]
		case !drained && was:
			delete(h.drain, node)
		}
		if drained {
			d := &h.rec.Drains[i]
			if reason != "" && reason != "none" {
				d.Reason = reason
			}
			// The reason's stamp is to the second: the drain was
			// before it + 1 s.
			if at, err := time.ParseInLocation("2006-01-02T15:04:05", stamp, time.Local); err == nil && at.Add(time.Second).Before(d.At) {
				d.At = at.Add(time.Second)
			}
		}
	}
}

// repair clears the hang of a node drained for cfg.repair and resumes it,
// as an administrator does: through gracewatch in its runs, with scontrol
// under Slurm alone (and when gracewatch's drains are switched off, since
// its actuators then change nothing in Slurm).
func (h *replayHarness) repair() {
	if h.repaired == nil {
		h.repaired = map[int]bool{}
	}
	now := time.Now()
	for node, i := range h.drain {
		d := h.rec.Drains[i]
		if h.repaired[i] || now.Sub(d.At) < h.cfg.repair {
			continue
		}
		h.repaired[i] = true
		for k := range h.rec.Teardowns {
			td := &h.rec.Teardowns[k]
			if td.Node == node && td.End.IsZero() && td.Cleared.IsZero() {
				td.Cleared = now
				h.s.release(td.Job)
			}
		}
		if h.agg != nil {
			aggregatorCLI(h.t, h.c, h.agg, "resume", node, "--reason", "replay: repaired")
		}
		if h.agg == nil || compareWithout(h.t, "drains") {
			h.s.must("scontrol", "update", "NodeName="+node, "State=RESUME")
		}
	}
}

// settled reports whether every submitted job has ended, every teardown
// ended or was cleared, and no node waits for its repair.
func (h *replayHarness) settled() bool {
	for _, j := range h.rec.Jobs {
		if j.End.IsZero() {
			return false
		}
	}
	for _, td := range h.rec.Teardowns {
		if td.End.IsZero() && td.Cleared.IsZero() {
			return false
		}
	}
	return len(h.drain) == 0
}

// noteLines reads a notes file's lines as fields (none if it is missing).
func noteLines(path string) [][]string {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out [][]string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 {
			out = append(out, f)
		}
	}
	return out
}

func noteTime(t *testing.T, s string) time.Time {
	t.Helper()
	sec, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("a note's time %q: %v", s, err)
	}
	return time.Unix(0, int64(sec*1e9))
}

// countCommands makes the Slurm commands gracewatch runs in the hub (its
// actuators and reservations) go through a scontrol that notes its
// arguments in scontrol.log first.
func (s *slurmNodes) countCommands() {
	s.t.Helper()
	scontrol, err := lookSlurm("scontrol")
	if err != nil {
		s.t.Fatal(err)
	}
	shim := s.path("shim")
	if err := os.MkdirAll(shim, 0o755); err != nil {
		s.t.Fatal(err)
	}
	text := fmt.Sprintf("#!/bin/sh\necho \"$*\" >>%s\nexec %s \"$@\"\n", s.path("scontrol.log"), scontrol)
	if err := os.WriteFile(shim+"/scontrol", []byte(text), 0o755); err != nil {
		s.t.Fatal(err)
	}
	hub := fmt.Sprintf("#!/bin/sh\nPATH=%s:$PATH\nexport PATH\nexec nsenter --net=/var/run/netns/%s \"$@\"\n", shim, s.netns)
	if err := os.WriteFile(s.inHub, []byte(hub), 0o755); err != nil {
		s.t.Fatal(err)
	}
}

// commandCounts counts the commands noted by countCommands: all, those
// that change something, and the reservations created.
func (s *slurmNodes) commandCounts() (all, writes, created int) {
	data, _ := os.ReadFile(s.path("scontrol.log"))
	for _, line := range strings.Split(string(data), "\n") {
		f := append(strings.Fields(line), "")
		if f[0] == "" {
			continue
		}
		all++
		switch f[0] {
		case "update", "create", "delete":
			writes++
		}
		if f[0] == "create" && f[1] == "reservation" {
			created++
		}
	}
	return all, writes, created
}
