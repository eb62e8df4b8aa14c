package diagnose

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxSummaryBytes bounds Summarize's result, which becomes the node's
// reason string.
const MaxSummaryBytes = 400

// maxDetailed is how many processes the summary describes.
const maxDetailed = 3

// Summarize returns the one-line reason for r, for example
//
//	job 1234 teardown exceeded grace 2m0s: 1 unkillable (pid 5814 cat, D in request_wait_answer, fuse /scratch)
//
// It counts the processes per class, worst first, and details up to three
// of the worst, with the file system of their suspect open file or cwd when
// that is a network or FUSE one. When nothing survives it says so with the
// outcome. The result is at most MaxSummaryBytes long.
//
// For a job whose end was never reported (NotEnded) it is
//
//	job 41 not ended by its deadline (E + 2m0s): 1 unkillable (pid 5814 a.out, D in request_wait_answer, fuse /scratch)
//
// or, with no process to name, NoEndSummary.
func Summarize(r *Report) string {
	head := fmt.Sprintf("job %s teardown exceeded grace %s", r.Job, r.Grace)
	switch {
	case r.NotEnded && r.Stage == StageOnDemand:
		head = fmt.Sprintf("job %s running (deadline E + %s)", r.Job, r.Grace)
	case r.NotEnded:
		head = fmt.Sprintf("job %s not ended by its deadline (E + %s)", r.Job, r.Grace)
	case r.Stage == StageOnDemand:
		head = fmt.Sprintf("job %s teardown (grace %s)", r.Job, r.Grace)
	}
	if len(r.Processes) == 0 {
		if r.NotEnded && r.Stage != StageOnDemand {
			return NoEndSummary(r.Job, r.Grace)
		}
		return clipSummary(head + ": " + noneLeft(r.Outcome))
	}
	procs := worstFirst(r.Processes)
	detailed := procs[:min(maxDetailed, len(procs))]
	var parts []string
	for _, c := range classOrder {
		n := 0
		var details []string
		for _, p := range procs {
			if p.Class != c {
				continue
			}
			n++
			if slices.ContainsFunc(detailed, func(d Process) bool { return d.PID == p.PID }) {
				details = append(details, detail(p))
			}
		}
		if n == 0 {
			continue
		}
		label := string(c)
		if c == Missed && r.Timeline.Term == nil {
			// Before any signal a sleeping or running process has missed
			// nothing: it is simply still there.
			label = "still running"
		}
		part := fmt.Sprintf("%d %s", n, label)
		if len(details) > 0 {
			part += " (" + strings.Join(details, "; ") + ")"
		}
		parts = append(parts, part)
	}
	if r.Omitted != nil {
		parts = append(parts, fmt.Sprintf("%d more processes not described", r.Omitted.Processes))
	}
	return clipSummary(head + ": " + strings.Join(parts, ", "))
}

// NoEndSummary is the reason of a job whose end was never reported by its
// deadline and that has no process to name (no observed cgroup, or an empty
// one that never held a process): "job 41: no end reported by the deadline
// (E + 2m0s)".
func NoEndSummary(job, grace string) string {
	return clipSummary(fmt.Sprintf("job %s: no end reported by the deadline (E + %s)", job, grace))
}

func noneLeft(outcome string) string {
	switch outcome {
	case OutcomeKilled:
		return "all processes killed"
	case OutcomeTerminated:
		return "all processes ended after SIGTERM"
	}
	return "no processes left"
}

// detail is "pid 5814 cat, D in request_wait_answer, fuse /scratch".
func detail(p Process) string {
	s := fmt.Sprintf("pid %d %s", p.PID, p.Comm)
	if p.State != "" {
		s += ", " + p.State
		if p.Wchan != "" {
			s += " in " + p.Wchan
		}
	}
	if f, ok := suspectFile(p); ok {
		s += ", " + f.FSType + " " + f.Mountpoint
	}
	return s
}

// clipSummary keeps s on one line (job ids and comms are arbitrary strings)
// and within MaxSummaryBytes.
func clipSummary(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	if len(s) <= MaxSummaryBytes {
		return s
	}
	const ellipsis = "…"
	cut := MaxSummaryBytes - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

// worstFirst returns a copy of ps sorted by class, worst first, then pid.
func worstFirst(ps []Process) []Process {
	out := slices.Clone(ps)
	slices.SortStableFunc(out, func(a, b Process) int {
		if d := b.Class.Severity() - a.Class.Severity(); d != 0 {
			return d
		}
		return a.PID - b.PID
	})
	return out
}

// fsFamily names the network or FUSE file system family of an fstype, or ""
// for a local one.
func fsFamily(fstype string) string {
	switch {
	case fstype == "nfs" || fstype == "nfs4":
		return "nfs"
	case fstype == "lustre":
		return "lustre"
	case fstype == "gpfs":
		return "gpfs"
	case fstype == "cifs" || fstype == "smb3":
		return "cifs"
	case fstype == "ceph":
		return "ceph"
	case fstype == "fuse" || fstype == "fuseblk" || strings.HasPrefix(fstype, "fuse."):
		return "fuse"
	}
	return ""
}

// stackFamily guesses from kernel function names which file system family
// a thread waits on.
func stackFamily(stack []string) string {
	for _, fn := range stack {
		switch {
		case fn == "request_wait_answer" || strings.HasPrefix(fn, "fuse_") || strings.HasPrefix(fn, "__fuse_"):
			return "fuse"
		case strings.HasPrefix(fn, "nfs") || strings.HasPrefix(fn, "rpc_") || strings.HasPrefix(fn, "__rpc_"):
			return "nfs"
		case strings.HasPrefix(fn, "ll_") || strings.HasPrefix(fn, "ptlrpc_") || strings.HasPrefix(fn, "ldlm_") ||
			strings.HasPrefix(fn, "cl_") || strings.HasPrefix(fn, "osc_") || strings.HasPrefix(fn, "mdc_"):
			return "lustre"
		case strings.HasPrefix(fn, "cxi") || strings.HasPrefix(fn, "gpfs"):
			return "gpfs"
		case strings.HasPrefix(fn, "cifs_") || strings.HasPrefix(fn, "smb2_"):
			return "cifs"
		case strings.HasPrefix(fn, "ceph_"):
			return "ceph"
		}
	}
	return ""
}

// suspectFile returns the file of p on a network or FUSE file system most
// likely to hold it: one of the family its stacks point at, if any, else
// the first such file (open files, then cwd, then root).
func suspectFile(p Process) (File, bool) {
	want := ""
	for _, t := range p.Threads {
		if t.Class == p.Class {
			if want = stackFamily(t.Stack); want != "" {
				break
			}
		}
	}
	var first *File
	for i := range p.Files {
		f := &p.Files[i]
		fam := fsFamily(f.FSType)
		if fam == "" {
			continue
		}
		if fam == want {
			return *f, true
		}
		if first == nil {
			first = f
		}
	}
	if first != nil {
		return *first, true
	}
	return File{}, false
}

// Suggest returns what an administrator can do about r's survivors, most
// urgent first and without repeats: abort the FUSE connection, check the NFS
// (Lustre, GPFS, SMB, Ceph) server, kill(2) a process cgroup.kill missed,
// or, for what nothing else releases, drain and reboot the node.
func Suggest(r *Report) []string {
	var out []string
	add := func(s string) {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	stuck, fsNamed := false, false
	for _, p := range worstFirst(r.Processes) {
		switch p.Class {
		case Unkillable, ExitHang:
			stuck = true
			if f, ok := suspectFile(p); ok {
				add(fsAction(f, r.NodeContext))
				fsNamed = true
			}
		case KillableD:
			add(fmt.Sprintf("pid %d (%s) is in D without SIGKILL pending: send SIGKILL; it should exit within seconds", p.PID, p.Comm))
		case Missed:
			add(fmt.Sprintf("kill(2) pid %d (%s) with SIGKILL: it is alive and has no SIGKILL pending (cgroup.kill may have missed it)", p.PID, p.Comm))
		case Dying:
			add(fmt.Sprintf("pid %d (%s) has SIGKILL pending and should exit: wait", p.PID, p.Comm))
		case Zombie:
			add(fmt.Sprintf("pid %d (%s) is a zombie: its parent pid %d must reap it (it does not keep the cgroup populated)", p.PID, p.Comm, p.PPID))
		}
	}
	switch {
	case stuck && fsNamed:
		add("if that does not release them, drain and reboot the node")
	case stuck:
		add("drain and reboot the node: a process stuck in D with SIGKILL pending only leaves with a reboot")
	}
	return out
}

// fsAction is what to do about a file system that holds a process. Its
// commands work as printed on the node they were diagnosed on: the FUSE
// abort writes to the fusectl mount that nc saw, and mounts fusectl first
// when it was not mounted.
func fsAction(f File, nc NodeContext) string {
	where := fmt.Sprintf("(%s on %s)", f.FSType, f.Mountpoint)
	switch fsFamily(f.FSType) {
	case "fuse":
		return fuseAbort(f, nc.FuseCtl, where)
	case "nfs":
		return fmt.Sprintf("check the NFS server %s %s", f.Source, where)
	case "lustre":
		return fmt.Sprintf("check the Lustre servers of %s %s", f.Source, where)
	case "gpfs":
		return fmt.Sprintf("check the GPFS cluster of %s %s", f.Source, where)
	case "cifs":
		return fmt.Sprintf("check the SMB server %s %s", f.Source, where)
	case "ceph":
		return fmt.Sprintf("check the Ceph cluster %s %s", f.Source, where)
	}
	return fmt.Sprintf("check the file system %s %s", f.Source, where)
}

// fuseCtlDefault is where fusectl is mounted by convention (and by
// systemd's sys-fs-fuse-connections.mount).
const fuseCtlDefault = "/sys/fs/fuse/connections"

// fuseAbort is the command that aborts f's FUSE connection, given where
// fusectl is mounted (NodeContext.FuseCtl). The connection's number is the
// minor of the mount's device.
func fuseAbort(f File, fusectl, where string) string {
	minor := ""
	if _, m, ok := strings.Cut(f.Device, ":"); ok {
		minor = m
	}
	dir := fusectl
	mount := ""
	switch fusectl {
	case FuseCtlNotMounted:
		dir = fuseCtlDefault
		mount = "mount -t fusectl none " + fuseCtlDefault + " && "
	case "":
		dir = fuseCtlDefault
	}
	if minor == "" {
		// No device in the report: the number is read from mountinfo
		// (never from a stat of the mountpoint, which hangs too).
		return fmt.Sprintf("abort the FUSE connection: %secho 1 > %s/$(awk -v m=%s '$5 == m {split($3, d, \":\"); print d[2]}' /proc/self/mountinfo)/abort %s",
			mount, dir, shellQuote(f.Mountpoint), where)
	}
	s := fmt.Sprintf("abort the FUSE connection: %secho 1 > %s/%s/abort %s", mount, dir, minor, where)
	if fusectl == "" {
		// Unknown (mountinfo unreadable): say what to do if it is missing.
		s += fmt.Sprintf("; if %s is empty, first: mount -t fusectl none %s", fuseCtlDefault, fuseCtlDefault)
	}
	return s
}

// shellQuote quotes s for sh when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// LogAttrs returns the attributes of the one structured log line about r:
// job, node, stage, outcome, cgroup (the first), processes, and for the
// worst survivor hung_pid and class. Under systemd the journal fields are
// JOB_ID, CGROUP, HUNG_PID and CLASS.
func LogAttrs(r *Report) []slog.Attr {
	attrs := []slog.Attr{
		slog.String("job", r.Job),
		slog.String("node", r.Node),
		slog.String("stage", r.Stage),
		slog.String("outcome", r.Outcome),
	}
	if len(r.Cgroups) > 0 {
		attrs = append(attrs, slog.String("cgroup", r.Cgroups[0].Path))
	}
	attrs = append(attrs, slog.Int("processes", len(r.Processes)))
	if ps := worstFirst(r.Processes); len(ps) > 0 {
		attrs = append(attrs, slog.Int("hung_pid", ps[0].PID), slog.String("class", string(ps[0].Class)))
	}
	return attrs
}
