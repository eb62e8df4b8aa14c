package diagnose

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gracewatch/gracewatch/agent/cgroup"
	"github.com/gracewatch/gracewatch/agent/procfs"
)

// Defaults of Options.
const (
	DefaultSampleInterval = 2 * time.Second
	DefaultKmsgPath       = "/dev/kmsg"
)

// Bounds of one report, so that a job with a huge process tree still gives a
// report that can be logged and sent to the aggregators.
const (
	// MaxProcesses is how many processes a report describes: the worst
	// by a first look at each one's /proc/PID/stat (see triage); the
	// others are counted by state in Report.Omitted. A job with 100,000
	// processes gives a report of at most MaxProcesses × maxThreads
	// threads, and a snapshot that reads one small file per process
	// beyond these.
	MaxProcesses    = 100
	maxThreads      = 512  // threads detailed per process
	maxFDs          = 256  // open files listed per process
	maxCmdlineBytes = 4096 // of a process's cmdline
	maxKernelLines  = 20   // "blocked for more than" lines
	maxKmsgRecords  = 1 << 17
)

// Clock tells the time; internal/clock.Clock satisfies it.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Options configures a Snapshotter. Zero fields take the defaults.
type Options struct {
	// Proc reads /proc; nil means procfs.New with its defaults.
	Proc *procfs.Reader
	// SampleInterval separates the two samples of every thread
	// (DefaultSampleInterval): a thread whose context switch counts did not
	// change between them was not scheduled, the kernel's hung-task test.
	SampleInterval time.Duration
	// Clock stamps reports (the wall clock when nil). The wait between
	// samples is real time.
	Clock Clock
	// Logger receives debug lines; nil discards them.
	Logger *slog.Logger
	// Node is the node's name, copied into reports.
	Node string
	// KmsgPath is the kernel log (DefaultKmsgPath), read without blocking
	// for "blocked for more than N seconds" lines.
	KmsgPath string
	// HungTaskPath is the kernel's count of hung tasks (default
	// <Proc root>/sys/kernel/hung_task_detect_count); its value when the
	// Snapshotter is made is the baseline of the reported delta.
	HungTaskPath string
	// Host, when set, gives the node's load, memory, uptime and state dir
	// space for NodeContext.Host (the agent wires internal/hostinfo).
	Host HostFunc
}

// Request says what to snapshot.
type Request struct {
	// Job is the job's id.
	Job string
	// Grace is the job's grace period G.
	Grace time.Duration
	// Stage is StageBeforeSignal, StageAfterEscalation or StageOnDemand.
	Stage string
	// Timeline is the job's teardown clock, copied into the report.
	Timeline Timeline
	// Cgroups are the job's cgroups; each is listed recursively.
	Cgroups []CgroupRef
	// PIDs are further processes to include, such as an epilogue the
	// caller started and has not reaped yet (a zombie has left its cgroup).
	PIDs []int
	// DSince, optional, is when the caller first saw each pid in D; it
	// gives Process.SecondsInD.
	DSince map[int]time.Time
	// Outcome, when not empty, is the report's outcome; otherwise it is
	// derived from the stage, the timeline and what survives.
	Outcome string
	// NotEnded is set for a job whose end was never reported (Report.
	// NotEnded).
	NotEnded bool
	// SingleSample takes one sample without waiting SampleInterval (the
	// snapshot before the first signal must not delay SIGTERM). Thread.
	// Scheduled is then unknown and false.
	SingleSample bool
}

// CgroupRef is one cgroup of a job.
type CgroupRef struct {
	// Path is the cgroup's absolute directory in the cgroup v2 mount.
	Path string
	// Owned is false for a foreign cgroup (Slurm's, Flux's) that is only
	// observed. A snapshot never writes to any cgroup either way.
	Owned bool
	// V1 is set for a cgroup of a v1 hierarchy: it has neither
	// cgroup.events nor cgroup.stat, only cgroup.procs.
	V1 bool
}

// Snapshotter takes diagnostic snapshots of a job's processes. It is safe
// for concurrent use.
type Snapshotter struct {
	proc     *procfs.Reader
	interval time.Duration
	clock    Clock
	log      *slog.Logger
	node     string
	kmsgPath string
	hungPath string
	hungBase int64 // -1 when the kernel lacks the count
	host     HostFunc
}

// NewSnapshotter returns a Snapshotter configured by o. It reads the hung
// task count once, as the baseline of later deltas.
func NewSnapshotter(o Options) *Snapshotter {
	s := &Snapshotter{
		proc:     o.Proc,
		interval: o.SampleInterval,
		clock:    o.Clock,
		log:      o.Logger,
		node:     o.Node,
		kmsgPath: o.KmsgPath,
		hungPath: o.HungTaskPath,
		host:     o.Host,
	}
	if s.proc == nil {
		s.proc = procfs.New(procfs.Options{})
	}
	if s.interval <= 0 {
		s.interval = DefaultSampleInterval
	}
	if s.clock == nil {
		s.clock = realClock{}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.log = s.log.With("component", "diagnose")
	if s.kmsgPath == "" {
		s.kmsgPath = DefaultKmsgPath
	}
	if s.hungPath == "" {
		s.hungPath = filepath.Join(s.proc.Root(), "sys/kernel/hung_task_detect_count")
	}
	s.hungBase = -1
	if n, err := readCount(s.hungPath); err == nil {
		s.hungBase = n
	} else {
		s.log.Debug("no hung task count", "path", s.hungPath, "err", err)
	}
	return s
}

// Snapshot diagnoses the processes of req's cgroups (and req.PIDs). It
// blocks for about SampleInterval plus the time of its reads (a read that
// hangs costs at most the Reader's timeout), so it belongs off the caller's
// main loop. It always returns a report: what could not be read is noted in
// the report's, a process's or a thread's Errors, and a process that exits
// during the snapshot is left out. When ctx ends, the report is cut short.
func (s *Snapshotter) Snapshot(ctx context.Context, req Request) *Report {
	start := time.Now()
	before := s.proc.Stats()
	r := &Report{
		Version:  ReportVersion,
		Node:     s.node,
		Job:      req.Job,
		Stage:    req.Stage,
		Taken:    s.clock.Now(),
		Grace:    req.Grace.String(),
		Timeline: req.Timeline,
		NotEnded: req.NotEnded,
	}
	errorf := func(format string, a ...any) { r.Errors = append(r.Errors, fmt.Sprintf(format, a...)) }

	var pids []int
	cgroupOf := map[int]string{}
	for _, ref := range req.Cgroups {
		info := CgroupInfo{Path: ref.Path, Owned: ref.Owned}
		var err error
		// A v1 cgroup has neither cgroup.events nor cgroup.stat: its
		// process lists below are all there is.
		if !ref.V1 {
			if info.Events, err = cgroup.ReadKV(filepath.Join(ref.Path, "cgroup.events")); err != nil {
				errorf("cgroup %s: cgroup.events unreadable: %s", ref.Path, procfs.Reason(err))
			}
			if info.Stat, err = cgroup.ReadKV(filepath.Join(ref.Path, "cgroup.stat")); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errorf("cgroup %s: cgroup.stat unreadable: %s", ref.Path, procfs.Reason(err))
			}
		}
		r.Cgroups = append(r.Cgroups, info)
		list, err := cgroup.Procs(ref.Path)
		if err != nil {
			errorf("cgroup %s: processes unreadable: %v", ref.Path, err)
		}
		for _, pid := range list {
			if _, dup := cgroupOf[pid]; !dup {
				cgroupOf[pid] = ref.Path
				pids = append(pids, pid)
			}
		}
	}
	for _, pid := range req.PIDs {
		if _, dup := cgroupOf[pid]; !dup {
			cgroupOf[pid] = ""
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	if len(pids) > MaxProcesses {
		pids, r.Omitted = s.triage(ctx, pids)
	}

	boot := time.Time{}
	if len(pids) > 0 {
		// Direct, not gopsutil's host.BootTime: this package is linked by
		// the agent's client, which must not link gopsutil.
		if data, err := s.proc.ReadFile(ctx, "stat"); err != nil {
			errorf("boot time unreadable: %s", procfs.Reason(err))
		} else if boot, err = procfs.ParseBootTime(data); err != nil {
			errorf("boot time: %v", err)
		}
	}

	// First sample: context switch counts of every thread.
	var first map[int]map[int]ctxSample
	switch {
	case len(pids) == 0:
	case req.SingleSample:
		r.Samples = 1
	default:
		r.Samples = 2
		first = make(map[int]map[int]ctxSample, len(pids))
		for _, pid := range pids {
			first[pid] = s.sampleCtx(ctx, pid)
		}
		t := time.NewTimer(s.interval)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}

	// Second sample: everything.
	mounts := &mountCache{byNS: map[string][]procfs.Mount{}}
	survivors := 0
	for _, pid := range pids {
		if ctx.Err() != nil {
			errorf("snapshot cut short: %v", ctx.Err())
			break
		}
		p, ok := s.process(ctx, pid, first[pid], r.Samples == 1, boot, mounts)
		if !ok {
			continue
		}
		p.Cgroup = cgroupOf[pid]
		if since, ok := req.DSince[pid]; ok && p.State == "D" {
			p.SecondsInD = r.Taken.Sub(since).Seconds()
		}
		if p.Class != Zombie {
			survivors++
		}
		r.Processes = append(r.Processes, p)
	}
	slices.SortStableFunc(r.Processes, func(a, b Process) int {
		if d := b.Class.Severity() - a.Class.Severity(); d != 0 {
			return d
		}
		return a.PID - b.PID
	})

	r.NodeContext = s.nodeContext(ctx, r)
	r.Outcome = req.Outcome
	if r.Outcome == "" {
		r.Outcome = deriveOutcome(req, survivors)
	}
	r.Summary = Summarize(r)
	r.Suggestions = Suggest(r)

	after := s.proc.Stats()
	s.log.Debug("snapshot taken", "job", req.Job, "stage", req.Stage, "processes", len(r.Processes),
		"reads", after.Reads-before.Reads, "timeouts", after.Timeouts-before.Timeouts,
		"refused", after.Refused-before.Refused, "took", time.Since(start))
	return r
}

func deriveOutcome(req Request, survivors int) string {
	switch {
	case survivors > 0 && req.Stage == StageAfterEscalation:
		return OutcomeHung
	case survivors > 0:
		return OutcomePending
	case req.Timeline.Kill != nil:
		return OutcomeKilled
	case req.Timeline.Term != nil:
		return OutcomeTerminated
	}
	return ""
}

type ctxSample struct{ vol, nonvol uint64 }

// sampleCtx reads the context switch counts of pid's threads.
func (s *Snapshotter) sampleCtx(ctx context.Context, pid int) map[int]ctxSample {
	tids, err := s.tids(ctx, pid)
	if err != nil {
		return nil
	}
	m := make(map[int]ctxSample, len(tids))
	for _, tid := range tids {
		data, err := s.proc.ReadFile(ctx, fmt.Sprintf("%d/task/%d/status", pid, tid))
		if err != nil {
			continue
		}
		if st, err := procfs.ParseStatus(data); err == nil {
			m[tid] = ctxSample{st.VoluntaryCtxtSwitches, st.NonvoluntaryCtxtSwitches}
		}
	}
	return m
}

// tids lists pid's threads in numeric order, at most maxThreads of them.
func (s *Snapshotter) tids(ctx context.Context, pid int) ([]int, error) {
	names, err := s.proc.ReadDirNames(ctx, fmt.Sprintf("%d/task", pid))
	if err != nil {
		return nil, err
	}
	tids := numeric(names)
	if len(tids) > maxThreads {
		tids = tids[:maxThreads]
	}
	return tids, nil
}

// process reads one process in full. It returns false when the process is
// gone. Direct through the bounded Reader, not gopsutil's process package:
// these are reads of hung processes (cmdline takes the target's mmap lock)
// and each must be bounded in time (see package procfs).
func (s *Snapshotter) process(ctx context.Context, pid int, first map[int]ctxSample, single bool, boot time.Time, mounts *mountCache) (Process, bool) {
	p := Process{PID: pid}
	e := s.entry(ctx, strconv.Itoa(pid)+"/", &p.Errors)

	st, ok, alive := e.stat()
	if !alive {
		return p, false
	}
	if ok {
		p.PPID, p.Comm, p.NumThreads = st.PPID, st.Comm, st.NumThreads
		if !boot.IsZero() {
			p.StartTime = procfs.StartTime(boot, st.StartTime).UTC()
		}
	}
	status, ok, alive := e.status()
	if !alive {
		return p, false
	}
	if ok {
		p.UID = status.UID[0]
		if p.Comm == "" {
			p.PPID, p.Comm, p.NumThreads = status.PPID, status.Name, status.Threads
		}
	}
	if data, ok := readOptional(e, "cmdline", e.proc.ReadFile); ok {
		p.Cmdline = boundCmdline(procfs.SplitCmdline(data))
	}
	if exe, ok := readOptional(e, "exe", e.proc.Readlink); ok {
		p.Exe = exe
	}

	tids, err := s.tids(ctx, pid)
	switch {
	case procfs.IsGone(err):
		return p, false
	case err != nil:
		e.errorf("%s", procfs.Unreadable("threads", err))
	}
	if p.NumThreads > maxThreads {
		e.errorf("threads truncated to %d of %d", maxThreads, p.NumThreads)
	}
	for _, tid := range tids {
		t, ok := s.thread(ctx, pid, tid, first, single)
		if ok {
			p.Threads = append(p.Threads, t)
		}
	}
	mainZombie := false
	for _, t := range p.Threads {
		if t.TID == pid && t.State == "Z" {
			mainZombie = slices.ContainsFunc(p.Threads, func(o Thread) bool {
				return o.TID != pid && o.State != "Z" && o.State != "X" && o.State != ""
			})
		}
	}
	for i := range p.Threads {
		t := &p.Threads[i]
		t.Class = Classify(*t, mainZombie && t.TID == pid)
	}
	if w := worstThread(p.Threads); w >= 0 {
		p.State, p.Wchan, p.Class = p.Threads[w].State, p.Threads[w].Wchan, p.Threads[w].Class
		if p.Wchan == "" && p.State == "D" && len(p.Threads[w].Stack) > 0 {
			p.Wchan = p.Threads[w].Stack[0]
		}
	}

	s.files(ctx, &p, mounts)

	// Left out if it exited while we read it.
	if _, err := s.proc.ReadFile(ctx, e.dir+"stat"); procfs.IsGone(err) {
		return p, false
	}
	return p, true
}

// thread reads one thread (the second sample). It returns false when the
// thread is gone. Direct: gopsutil has no wchan, kernel stack, syscall or
// pending and blocked signal masks, and the reads must be bounded in time.
func (s *Snapshotter) thread(ctx context.Context, pid, tid int, first map[int]ctxSample, single bool) (Thread, bool) {
	t := Thread{TID: tid}
	e := s.entry(ctx, fmt.Sprintf("%d/task/%d/", pid, tid), &t.Errors)

	st, ok, alive := e.stat()
	if !alive {
		return t, false
	}
	if ok {
		t.Comm, t.State, t.Flags = st.Comm, st.State, st.Flags
		t.Exiting = st.Exiting()
		t.Utime, t.Stime = st.Utime, st.Stime
	}
	status, ok, alive := e.status()
	if !alive {
		return t, false
	}
	if ok {
		if t.State == "" {
			t.State, t.Comm = status.State, status.Name
		}
		t.VoluntaryCtxt, t.NonvoluntaryCtxt = status.VoluntaryCtxtSwitches, status.NonvoluntaryCtxtSwitches
		t.VoluntaryCtxtFirst, t.NonvoluntaryCtxtFirst = t.VoluntaryCtxt, t.NonvoluntaryCtxt
		t.Scheduled = !single // without a first sample: born between the samples
		if f, ok := first[tid]; ok {
			t.VoluntaryCtxtFirst, t.NonvoluntaryCtxtFirst = f.vol, f.nonvol
			t.Scheduled = f.vol != status.VoluntaryCtxtSwitches || f.nonvol != status.NonvoluntaryCtxtSwitches
		}
		t.SigPnd, t.ShdPnd, t.SigBlk = signals(status.SigPnd), signals(status.ShdPnd), signals(status.SigBlk)
		t.KillPending = (status.SigPnd|status.ShdPnd)&procfs.SigKillMask != 0
	}
	if data, ok := readOptional(e, "wchan", e.proc.ReadFile); ok {
		t.Wchan = procfs.ParseWchan(data)
	}
	if data, ok := readOptional(e, "stack", e.proc.ReadFile); ok {
		t.Stack = procfs.ParseStack(data)
	}
	if data, ok := readOptional(e, "syscall", e.proc.ReadFile); ok {
		t.Syscall = strings.TrimSpace(string(data))
	}
	return t, true
}

func signals(mask uint64) Signals {
	return Signals{Mask: fmt.Sprintf("%016x", mask), Names: procfs.SignalNames(mask)}
}

// files lists p's open files, cwd and root by readlink only, and names the
// mount of each absolute target from mountinfo. The targets themselves are
// never touched: on a hung file system that would hang too.
func (s *Snapshotter) files(ctx context.Context, p *Process, mounts *mountCache) {
	base := strconv.Itoa(p.PID)
	errorf := func(format string, a ...any) { p.Errors = append(p.Errors, fmt.Sprintf(format, a...)) }
	names, err := s.proc.ReadDirNames(ctx, base+"/fd")
	if err != nil && !procfs.IsGone(err) {
		errorf("%s", procfs.Unreadable("open files", err))
	}
	fds := numeric(names)
	if len(fds) > maxFDs {
		errorf("open files truncated to %d of %d", maxFDs, len(fds))
		fds = fds[:maxFDs]
	}
	links := make([]string, 0, len(fds)+2)
	for _, fd := range fds {
		links = append(links, strconv.Itoa(fd))
	}
	links = append(links, "cwd", "root")
	for _, name := range links {
		rel := base + "/fd/" + name
		if name == "cwd" || name == "root" {
			rel = base + "/" + name
		}
		target, err := s.proc.Readlink(ctx, rel)
		if err != nil {
			if !procfs.IsGone(err) {
				errorf("%s", procfs.Unreadable("fd "+name, err))
			}
			continue
		}
		f := File{FD: name, Target: target}
		if strings.HasPrefix(target, "/") {
			if ms := s.mountsOf(ctx, p, mounts); ms != nil {
				if m, ok := procfs.MountOf(ms, strings.TrimSuffix(target, " (deleted)")); ok {
					f.FSType, f.Mountpoint, f.Source, f.Device = m.FSType, m.Mountpoint, m.Source, m.Device()
				}
			}
		}
		p.Files = append(p.Files, f)
	}
}

// numeric returns the names that are numbers, as numbers, sorted.
func numeric(names []string) []int {
	var ns []int
	for _, n := range names {
		if i, err := strconv.Atoi(n); err == nil {
			ns = append(ns, i)
		}
	}
	slices.Sort(ns)
	return ns
}

// boundCmdline keeps at most maxCmdlineBytes of the arguments, marking a
// cut with "…".
func boundCmdline(args []string) []string {
	total := 0
	for i, a := range args {
		total += len(a) + 1
		if total > maxCmdlineBytes {
			return append(args[:i:i], "…")
		}
	}
	return args
}
