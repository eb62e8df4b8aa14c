// Package report is the wire form of a diagnosis of a job's teardown: the
// JSON that the agent saves under its state dir, serves on its socket
// (nodeagent diagnose) and sends to the aggregators, described field by
// field. It is a leaf package (the standard library only), so that the
// socket API, its client and the aggregator can carry a report without
// linking agent/diagnose, which takes the snapshots that fill it.
package report

import "time"

// ReportVersion is the version of the Report JSON written by this package.
const ReportVersion = 1

// Class is the verdict on a surviving thread or process (docs/DESIGN.md §3.3).
type Class string

// Classes, from worst to most benign.
const (
	// Unkillable: state D with SIGKILL pending (SigPnd or ShdPnd bit 9).
	Unkillable Class = "unkillable"
	// ExitHang: state D with PF_EXITING, stack in do_exit/exit_mmap/__fput.
	ExitHang Class = "exit-hang"
	// KillableD: state D without SIGKILL pending.
	KillableD Class = "killable-d"
	// Missed: main thread a zombie with live threads, or S/R without SIGKILL
	// pending: needs kill(2).
	Missed Class = "missed"
	// Dying: S/R with SIGKILL pending: on its way out.
	Dying Class = "dying"
	// Zombie: Z, needs reaping, harmless to emptiness.
	Zombie Class = "zombie"
)

// Severity orders classes from most benign (Zombie, 1) to worst
// (Unkillable, 6); an unknown class is 0.
func (c Class) Severity() int {
	switch c {
	case Unkillable:
		return 6
	case ExitHang:
		return 5
	case KillableD:
		return 4
	case Missed:
		return 3
	case Dying:
		return 2
	case Zombie:
		return 1
	}
	return 0
}

// Stages of a report.
const (
	StageBeforeSignal    = "before-signal"    // at the deadline, before SIGTERM
	StageAfterEscalation = "after-escalation" // unkillable_after past SIGKILL
	StageOnDemand        = "on-demand"        // nodeagent diagnose
)

// Outcomes of a violating teardown.
const (
	OutcomePending    = "pending"    // tearing down within its grace (an on-demand report)
	OutcomeOverdue    = "overdue"    // the deadline passed; no signal sent yet
	OutcomeEscalated  = "escalated"  // SIGTERM (and SIGKILL) sent; survivors not yet classified
	OutcomeTerminated = "terminated" // gone after SIGTERM
	OutcomeKilled     = "killed"     // needed SIGKILL, then gone
	OutcomeHung       = "hung"       // survived unkillable_after
)

// Timeline is the job's teardown clock.
type Timeline struct {
	// Expiration is E, when the job has one.
	Expiration    *time.Time `json:"expiration,omitempty"`
	TeardownStart time.Time  `json:"teardown_start"` // T_end; zero while no end is known
	Deadline      time.Time  `json:"deadline"`
	Term          *time.Time `json:"term,omitempty"`
	Kill          *time.Time `json:"kill,omitempty"`
	Released      *time.Time `json:"released,omitempty"`
}

// Signals decodes a signal mask ("0000000000000100" → ["SIGKILL"]).
type Signals struct {
	Mask  string   `json:"mask"`
	Names []string `json:"names,omitempty"`
}

// Thread is one task of a process, sampled twice.
type Thread struct {
	TID     int    `json:"tid"`
	Comm    string `json:"comm"`
	State   string `json:"state"` // one letter: R S D Z T t X I
	Flags   uint64 `json:"flags"`
	Exiting bool   `json:"exiting"` // PF_EXITING
	Utime   uint64 `json:"utime_ticks"`
	Stime   uint64 `json:"stime_ticks"`
	// VoluntaryCtxt and NonvoluntaryCtxt are from the second sample;
	// Scheduled reports whether either changed between the samples.
	VoluntaryCtxt    uint64   `json:"voluntary_ctxt_switches"`
	NonvoluntaryCtxt uint64   `json:"nonvoluntary_ctxt_switches"`
	Scheduled        bool     `json:"scheduled"`
	Wchan            string   `json:"wchan"`
	Stack            []string `json:"stack,omitempty"`
	Syscall          string   `json:"syscall,omitempty"`
	SigPnd           Signals  `json:"sigpnd"`
	ShdPnd           Signals  `json:"shdpnd"`
	SigBlk           Signals  `json:"sigblk"`
	KillPending      bool     `json:"kill_pending"`
	Class            Class    `json:"class"`
	Errors           []string `json:"errors,omitempty"` // e.g. "stack unreadable: blocked"

	// VoluntaryCtxtFirst and NonvoluntaryCtxtFirst are from the first
	// sample (equal to the second for a thread born between the samples).
	VoluntaryCtxtFirst    uint64 `json:"voluntary_ctxt_switches_first"`
	NonvoluntaryCtxtFirst uint64 `json:"nonvoluntary_ctxt_switches_first"`
}

// File is an open file, the cwd or the root of a process, named by readlink
// only and matched to its mount.
type File struct {
	FD         string `json:"fd"` // "3", "cwd", "root"
	Target     string `json:"target"`
	FSType     string `json:"fstype,omitempty"`
	Mountpoint string `json:"mountpoint,omitempty"`
	Source     string `json:"source,omitempty"`
	// Device is the mount's major:minor (for fuse, the minor is the
	// connection number under /sys/fs/fuse/connections).
	Device string `json:"device,omitempty"`
}

// Process is one process of the job's cgroups.
type Process struct {
	PID        int       `json:"pid"`
	PPID       int       `json:"ppid"`
	Comm       string    `json:"comm"`
	Exe        string    `json:"exe,omitempty"`
	Cmdline    []string  `json:"cmdline,omitempty"`
	UID        int       `json:"uid"`
	StartTime  time.Time `json:"start_time"`
	Cgroup     string    `json:"cgroup"`
	NumThreads int       `json:"num_threads"`
	Threads    []Thread  `json:"threads"`
	Files      []File    `json:"files,omitempty"`
	// State, Wchan and Class summarise the worst thread.
	State string `json:"state"`
	Wchan string `json:"wchan"`
	Class Class  `json:"class"`
	// SecondsInD is how long the worst thread has been seen in D by this
	// agent (0 when unknown).
	SecondsInD float64  `json:"seconds_in_d,omitempty"`
	Errors     []string `json:"errors,omitempty"` // "cmdline unreadable: blocked"
}

// CgroupInfo is a cgroup's own view of itself.
type CgroupInfo struct {
	Path   string            `json:"path"`
	Owned  bool              `json:"owned"` // false: observed read-only
	Events map[string]string `json:"events,omitempty"`
	Stat   map[string]string `json:"stat,omitempty"`
}

// NodeContext is what the kernel says about the whole node.
type NodeContext struct {
	// HungTaskDelta is the change of /proc/sys/kernel/hung_task_detect_count
	// since the agent started (-1 when the kernel lacks the file).
	HungTaskDelta int64    `json:"hung_task_delta"`
	KernelLines   []string `json:"kernel_lines,omitempty"` // "blocked for more than N seconds"
	// LoadAvg is the 1, 5 and 15 minute load averages ("0.10 0.20 0.30"),
	// from Host.
	LoadAvg string `json:"loadavg"`
	// Host is the node's load, memory, uptime and state dir space (read
	// through gopsutil by the agent); nil when the snapshot had no
	// Options.Host.
	Host *HostFacts `json:"host,omitempty"`
	// FuseCtl is where the FUSE control file system (fusectl, whose
	// connections/N/abort ends a hung FUSE connection) is mounted in the
	// agent's mount namespace: its mountpoint, FuseCtlNotMounted, or empty
	// when unknown. Suggest prints the abort command for it.
	FuseCtl string `json:"fusectl,omitempty"`
}

// FuseCtlNotMounted is NodeContext.FuseCtl when mountinfo has no fusectl.
const FuseCtlNotMounted = "not-mounted"

// HostFacts is the node's context that the agent reads through gopsutil.
// Its fields are those of internal/hostinfo.Facts (the agent converts one
// to the other), kept here as the report's own wire type.
type HostFacts struct {
	Load1             float64  `json:"load1"`
	Load5             float64  `json:"load5"`
	Load15            float64  `json:"load15"`
	MemTotalBytes     uint64   `json:"mem_total_bytes"`
	MemAvailableBytes uint64   `json:"mem_available_bytes"`
	UptimeSeconds     uint64   `json:"uptime_seconds"`
	StateDir          string   `json:"state_dir,omitempty"`
	StateDirFreeBytes uint64   `json:"state_dir_free_bytes,omitempty"`
	StateDirSizeBytes uint64   `json:"state_dir_size_bytes,omitempty"`
	Errors            []string `json:"errors,omitempty"`
}

// Report is one diagnosis of one job's teardown. It is saved as JSON under
// the state dir and sent to the aggregators.
type Report struct {
	Version int    `json:"version"`
	Node    string `json:"node"`
	Job     string `json:"job"`
	// User is the job's user as its registration named it (at most 64
	// bytes of [A-Za-z0-9._-], an optional trailing $); absent when none
	// did.
	User  string `json:"user,omitempty"`
	Stage string `json:"stage"`
	// NotEnded is set for a job whose end was never reported by its
	// deadline E + G: what is hung is the job itself, not its teardown.
	NotEnded    bool         `json:"not_ended,omitempty"`
	Taken       time.Time    `json:"taken"`
	Grace       string       `json:"grace"`
	Timeline    Timeline     `json:"timeline"`
	Cgroups     []CgroupInfo `json:"cgroups"`
	Processes   []Process    `json:"processes"`
	NodeContext NodeContext  `json:"node_context"`
	Outcome     string       `json:"outcome"`
	Suggestions []string     `json:"suggestions,omitempty"`
	// Summary is the one-line reason ("job 1234 teardown exceeded grace
	// 120s: 1 unkillable (pid 5814 cat, D in request_wait_answer, fuse
	// /scratch)").
	Summary string `json:"summary"`
	// Errors lists what could not be read at all.
	Errors []string `json:"errors,omitempty"`
	// History is set (by nodeagent diagnose) on the report of a job whose
	// teardown has ended: its processes are gone, what it says was true
	// when it was taken (Timeline.Released says when they went).
	History bool `json:"history,omitempty"`

	// Omitted counts the processes beyond MaxProcesses that the report
	// does not describe (nil: none).
	Omitted *Omitted `json:"omitted,omitempty"`

	// Samples is how many samples of the threads were taken: 2, or 1 for a
	// Request with SingleSample (Thread.Scheduled is then unknown and
	// false), 0 when there was no process.
	Samples int `json:"samples,omitempty"`
}

// Omitted is what a report leaves out of a huge process tree: how many
// processes, and their main threads' states ("S", "R", "D", "Z", or "?"
// for an unreadable one).
type Omitted struct {
	Processes int            `json:"processes"`
	ByState   map[string]int `json:"by_state"`
}
