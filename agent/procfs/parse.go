package procfs

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ClockTicks is USER_HZ, the unit of the tick counts in /proc/PID/stat
// (utime, stime, starttime). sysconf(_SC_CLK_TCK) is a libc call that
// golang.org/x/sys does not offer; the kernel fixes USER_HZ at 100 on every
// architecture Linux still supports (alpha, at 1024, was the exception), so
// it is a constant here, as in prometheus/procfs.
const ClockTicks = 100

// PFExiting is the kernel's PF_EXITING, the task flag (/proc/PID/stat field
// 9) of a task in do_exit.
const PFExiting = 0x4

// Stat is the part of /proc/PID/stat or /proc/PID/task/TID/stat that the
// diagnostics use.
type Stat struct {
	PID        int
	Comm       string
	State      string // one letter: R S D Z T t X I ...
	PPID       int
	Flags      uint64
	Utime      uint64 // clock ticks
	Stime      uint64 // clock ticks
	NumThreads int
	StartTime  uint64 // clock ticks after boot
}

// Exiting reports whether PF_EXITING is set.
func (s Stat) Exiting() bool { return s.Flags&PFExiting != 0 }

// ParseStat parses /proc/PID/stat. The comm field may hold spaces and
// parentheses; it ends at the last ')'.
func ParseStat(data []byte) (Stat, error) {
	var s Stat
	line := string(bytes.TrimSpace(data))
	open := strings.IndexByte(line, '(')
	closing := strings.LastIndexByte(line, ')')
	if open < 0 || closing < open {
		return s, fmt.Errorf("parse stat: no (comm) in %q", clip(line))
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line[:open]))
	if err != nil {
		return s, fmt.Errorf("parse stat: pid: %w", err)
	}
	s.PID = pid
	s.Comm = line[open+1 : closing]
	// f[i] is field i+3 of proc(5).
	f := strings.Fields(line[closing+1:])
	if len(f) < 20 {
		return s, fmt.Errorf("parse stat: %d fields after comm, want at least 20", len(f))
	}
	s.State = f[0]
	nums := []struct {
		field int
		dst   any
	}{
		{4, &s.PPID}, {9, &s.Flags}, {14, &s.Utime}, {15, &s.Stime},
		{20, &s.NumThreads}, {22, &s.StartTime},
	}
	for _, n := range nums {
		v := f[n.field-3]
		switch d := n.dst.(type) {
		case *int:
			x, err := strconv.Atoi(v)
			if err != nil {
				return s, fmt.Errorf("parse stat: field %d: %w", n.field, err)
			}
			*d = x
		case *uint64:
			x, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return s, fmt.Errorf("parse stat: field %d: %w", n.field, err)
			}
			*d = x
		}
	}
	return s, nil
}

// Status is the part of /proc/PID/status (or task/TID/status) that the
// diagnostics use.
type Status struct {
	Name                     string
	State                    string // one letter
	Tgid                     int
	PID                      int
	PPID                     int
	UID                      [4]int // real, effective, saved, file system
	Groups                   []int
	Threads                  int
	SigPnd                   uint64 // pending for this thread
	ShdPnd                   uint64 // pending for the whole thread group
	SigBlk                   uint64
	SigIgn                   uint64
	SigCgt                   uint64
	VoluntaryCtxtSwitches    uint64
	NonvoluntaryCtxtSwitches uint64
}

// ParseStatus parses /proc/PID/status. Lines it does not know are skipped.
func ParseStatus(data []byte) (Status, error) {
	var s Status
	for _, line := range strings.Split(string(data), "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		var err error
		switch key {
		case "Name":
			s.Name = val
		case "State":
			s.State, _, _ = strings.Cut(val, " ")
		case "Tgid":
			s.Tgid, err = strconv.Atoi(val)
		case "Pid":
			s.PID, err = strconv.Atoi(val)
		case "PPid":
			s.PPID, err = strconv.Atoi(val)
		case "Uid":
			f := strings.Fields(val)
			if len(f) != 4 {
				err = fmt.Errorf("%d ids, want 4", len(f))
				break
			}
			for i := range f {
				if s.UID[i], err = strconv.Atoi(f[i]); err != nil {
					break
				}
			}
		case "Groups":
			for _, g := range strings.Fields(val) {
				var n int
				if n, err = strconv.Atoi(g); err != nil {
					break
				}
				s.Groups = append(s.Groups, n)
			}
		case "Threads":
			s.Threads, err = strconv.Atoi(val)
		case "SigPnd":
			s.SigPnd, err = ParseSigMask(val)
		case "ShdPnd":
			s.ShdPnd, err = ParseSigMask(val)
		case "SigBlk":
			s.SigBlk, err = ParseSigMask(val)
		case "SigIgn":
			s.SigIgn, err = ParseSigMask(val)
		case "SigCgt":
			s.SigCgt, err = ParseSigMask(val)
		case "voluntary_ctxt_switches":
			s.VoluntaryCtxtSwitches, err = strconv.ParseUint(val, 10, 64)
		case "nonvoluntary_ctxt_switches":
			s.NonvoluntaryCtxtSwitches, err = strconv.ParseUint(val, 10, 64)
		}
		if err != nil {
			return s, fmt.Errorf("parse status: %s: %w", key, err)
		}
	}
	if s.State == "" {
		return s, fmt.Errorf("parse status: no State line")
	}
	return s, nil
}

// Mount is one line of /proc/PID/mountinfo.
type Mount struct {
	ID         int
	ParentID   int
	Major      uint32
	Minor      uint32
	Root       string // root of the mount within its file system
	Mountpoint string // unescaped
	Options    string
	FSType     string // "nfs4", "fuse.sshfs", ...
	Source     string // unescaped; "none" or "" when the kernel has none
	SuperOpts  string
}

// Device returns "major:minor". For fuse the minor is the connection number
// under /sys/fs/fuse/connections.
func (m Mount) Device() string { return fmt.Sprintf("%d:%d", m.Major, m.Minor) }

// ParseMountinfo parses /proc/PID/mountinfo (proc(5)). Octal escapes
// (\040 for a space, \011, \012, \134) in paths are undone.
func ParseMountinfo(data []byte) ([]Mount, error) {
	var ms []Mount
	for i, line := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Fields(line)
		sep := -1
		for j := 6; j < len(f); j++ {
			if f[j] == "-" {
				sep = j
				break
			}
		}
		if len(f) < 7 || sep < 0 || len(f) < sep+3 {
			return nil, fmt.Errorf("parse mountinfo: line %d: malformed: %q", i+1, clip(line))
		}
		var m Mount
		var err error
		if m.ID, err = strconv.Atoi(f[0]); err != nil {
			return nil, fmt.Errorf("parse mountinfo: line %d: mount id: %w", i+1, err)
		}
		if m.ParentID, err = strconv.Atoi(f[1]); err != nil {
			return nil, fmt.Errorf("parse mountinfo: line %d: parent id: %w", i+1, err)
		}
		maj, min, ok := strings.Cut(f[2], ":")
		ma, err1 := strconv.ParseUint(maj, 10, 32)
		mi, err2 := strconv.ParseUint(min, 10, 32)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("parse mountinfo: line %d: bad device %q", i+1, f[2])
		}
		m.Major, m.Minor = uint32(ma), uint32(mi)
		m.Root = Unescape(f[3])
		m.Mountpoint = Unescape(f[4])
		m.Options = f[5]
		m.FSType = f[sep+1]
		m.Source = Unescape(f[sep+2])
		if len(f) > sep+3 {
			m.SuperOpts = f[sep+3]
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// Unescape undoes the octal escapes (\ooo) the kernel writes for space, tab,
// newline and backslash in mountinfo paths.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// MountOf returns the mount that holds the absolute path p: the one with the
// longest mountpoint that is p or a parent directory of p; of mounts stacked
// on the same mountpoint, the last (topmost) one. It never touches p.
func MountOf(mounts []Mount, p string) (Mount, bool) {
	var best Mount
	found := false
	for _, m := range mounts {
		mp := m.Mountpoint
		under := p == mp || mp == "/" && strings.HasPrefix(p, "/") ||
			strings.HasPrefix(p, mp) && p[len(mp)] == '/'
		if under && (!found || len(mp) >= len(best.Mountpoint)) {
			best, found = m, true
		}
	}
	return best, found
}

// ParseBootTime returns the boot time from the btime line of /proc/stat.
func ParseBootTime(data []byte) (time.Time, error) {
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("parse stat btime: %w", err)
			}
			return time.Unix(n, 0), nil
		}
	}
	return time.Time{}, fmt.Errorf("parse stat: no btime line")
}

// StartTime turns a starttime in clock ticks after boot (Stat.StartTime) into
// a wall-clock time.
func StartTime(boot time.Time, ticks uint64) time.Time {
	return boot.Add(time.Duration(ticks) * (time.Second / ClockTicks))
}

// ParseStack returns the function names of /proc/PID/task/TID/stack, innermost
// first: "[<0>] request_wait_answer+0x12a/0x220 [fuse]" gives
// "request_wait_answer".
func ParseStack(data []byte) []string {
	var fns []string
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if i := strings.IndexByte(line, ']'); strings.HasPrefix(line, "[") && i > 0 {
			line = strings.TrimSpace(line[i+1:])
		}
		if i := strings.IndexAny(line, "+ "); i >= 0 {
			line = line[:i]
		}
		if line != "" {
			fns = append(fns, line)
		}
	}
	return fns
}

// ParseWchan returns the symbol of /proc/PID/wchan, or "" for "0" (running
// or not sleeping in the kernel).
func ParseWchan(data []byte) string {
	s := strings.TrimSpace(string(data))
	if s == "0" {
		return ""
	}
	return s
}

// CgroupV2Path returns the path of the "0::" line of /proc/PID/cgroup
// (relative to the cgroup v2 mount as seen from the reader's cgroup
// namespace), or "" when there is none.
func CgroupV2Path(data []byte) string {
	for _, line := range strings.Split(string(data), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return strings.TrimSpace(p)
		}
	}
	return ""
}

// SplitCmdline splits /proc/PID/cmdline at its NUL bytes.
func SplitCmdline(data []byte) []string {
	data = bytes.TrimRight(data, "\x00")
	if len(data) == 0 {
		return nil
	}
	return strings.Split(string(data), "\x00")
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
