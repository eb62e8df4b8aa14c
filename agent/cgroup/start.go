package cgroup

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ShimArg is os.Args[1] of the shim: the agent re-executed by Start, when
// clone3(CLONE_INTO_CGROUP) is missing, to join a cgroup and then exec the
// real program. See RunShimIfRequested.
const ShimArg = "__gracewatch_cgroup_shim"

// Start starts cmd directly inside the owned cgroup at path: the process is a
// member of it from its first instruction, never "started, then moved". It
// refuses paths outside Root, Root itself, and a cgroup holding the agent
// (ErrNotOwned). The caller's SysProcAttr fields (Credential, Setsid,
// Pdeathsig, ...) are kept; UseCgroupFD and CgroupFD are set for the start
// and cmd.SysProcAttr is restored afterwards.
//
// Without clone3(CLONE_INTO_CGROUP) (or with Options.ForceShim) it runs
// ShimPath as [cmd.Args[0], ShimArg, path, options..., "--", cmd.Path,
// cmd.Args[1:]...]: the shim writes its own pid into path/cgroup.procs, drops
// to cmd.SysProcAttr.Credential if set, and execs cmd.Path with argv
// [cmd.Args[0], cmd.Args[1:]...], so cmd.Process is the program itself (same
// pid). Start then blocks until the shim has joined the cgroup and exec'd,
// and a failure of either is Start's error (wrapping the errno, e.g.
// ENOENT); the shim has then been reaped and cmd must not be waited for. The
// shim path does not support Chroot, AmbientCaps or CLONE_NEWUSER.
//
// Start is safe for concurrent use with different cmds.
func (m *Manager) Start(cmd *exec.Cmd, path string) error {
	p, err := m.owned("start", path)
	if err != nil {
		return err
	}
	if m.useShim() {
		return m.startShim(cmd, p)
	}
	fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("start %s in cgroup %s: %w", cmd.Path, p, err)
	}
	defer unix.Close(fd)
	orig := cmd.SysProcAttr
	attr := &syscall.SysProcAttr{}
	if orig != nil {
		*attr = *orig
	}
	attr.UseCgroupFD = true
	attr.CgroupFD = fd
	cmd.SysProcAttr = attr
	err = cmd.Start()
	cmd.SysProcAttr = orig
	if err != nil {
		return fmt.Errorf("start %s in cgroup %s: %w", cmd.Path, p, err)
	}
	m.log.Debug("started in cgroup", "cgroup", p, "pid", cmd.Process.Pid, "path", cmd.Path)
	return nil
}

// startShim is Start through the shim.
func (m *Manager) startShim(cmd *exec.Cmd, p string) error {
	if cmd.Err != nil {
		return cmd.Err
	}
	if cmd.Path == "" {
		return fmt.Errorf("start in cgroup %s: no command", p)
	}
	attr := &syscall.SysProcAttr{}
	if cmd.SysProcAttr != nil {
		*attr = *cmd.SysProcAttr
	}
	switch {
	case attr.Chroot != "", len(attr.AmbientCaps) > 0, attr.Cloneflags&syscall.CLONE_NEWUSER != 0,
		len(attr.UidMappings) > 0, len(attr.GidMappings) > 0:
		return fmt.Errorf("start %s in cgroup %s: chroot, ambient capabilities and user namespaces are not supported by the shim fallback", cmd.Path, p)
	}
	attr.UseCgroupFD = false

	status, statusW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("start %s in cgroup %s: %w", cmd.Path, p, err)
	}
	defer status.Close()

	argv0 := cmd.Path
	if len(cmd.Args) > 0 {
		argv0 = cmd.Args[0]
	}
	args := []string{argv0, ShimArg, p, "-status-fd=" + strconv.Itoa(3+len(cmd.ExtraFiles))}
	if c := attr.Credential; c != nil {
		// The shim must still be root when it writes cgroup.procs.
		args = append(args, "-cred="+formatCred(c))
		attr.Credential = nil
	}
	if attr.Pdeathsig != 0 {
		// The parent sets it on the shim's first thread only, and a
		// credential change clears it: the shim sets it again on the thread
		// that execs.
		args = append(args, "-pdeathsig="+strconv.Itoa(int(attr.Pdeathsig)))
	}
	args = append(args, "--", cmd.Path)
	if len(cmd.Args) > 1 {
		args = append(args, cmd.Args[1:]...)
	}

	origPath, origArgs, origExtra, origAttr := cmd.Path, cmd.Args, cmd.ExtraFiles, cmd.SysProcAttr
	cmd.Path = m.shimPath
	cmd.Args = args
	cmd.ExtraFiles = append(slices.Clip(origExtra), statusW)
	cmd.SysProcAttr = attr
	err = cmd.Start()
	cmd.Path, cmd.Args, cmd.ExtraFiles, cmd.SysProcAttr = origPath, origArgs, origExtra, origAttr
	statusW.Close()
	if err != nil {
		return fmt.Errorf("start shim %s for %s in cgroup %s: %w", m.shimPath, origPath, p, err)
	}

	// EOF comes when the shim's exec closes its copy (close-on-exec) or the
	// shim exits.
	msg, rerr := io.ReadAll(status)
	switch {
	case rerr == nil && string(msg) == shimJoined:
		m.log.Debug("started in cgroup through the shim", "cgroup", p, "pid", cmd.Process.Pid, "path", origPath)
		return nil
	case rerr != nil:
		err = fmt.Errorf("start %s in cgroup %s: read shim status: %w", origPath, p, rerr)
	case len(msg) == 0:
		err = fmt.Errorf("start %s in cgroup %s: shim %s exited before joining the cgroup", origPath, p, m.shimPath)
	default:
		err = fmt.Errorf("start %s in cgroup %s: %w", origPath, p, parseShimError(strings.TrimPrefix(string(msg), shimJoined)))
	}
	if werr := cmd.Wait(); werr != nil {
		err = fmt.Errorf("%w (shim: %v)", err, werr)
	}
	return err
}

// shimJoined is the shim's status byte for "joined the cgroup".
const shimJoined = "j"

// shimError is a failure reported by the shim: "e<errno>:<message>".
type shimError struct {
	msg   string
	errno syscall.Errno
}

func (e *shimError) Error() string { return e.msg }
func (e *shimError) Unwrap() error {
	if e.errno == 0 {
		return nil
	}
	return e.errno
}

func parseShimError(s string) error {
	s = strings.TrimPrefix(s, "e")
	num, msg, ok := strings.Cut(s, ":")
	if !ok {
		return &shimError{msg: "shim: " + s}
	}
	n, _ := strconv.Atoi(num)
	return &shimError{msg: msg, errno: syscall.Errno(n)}
}

// formatCred encodes a credential as uid:gid:g1,g2[:nosetgroups].
func formatCred(c *syscall.Credential) string {
	groups := make([]string, len(c.Groups))
	for i, g := range c.Groups {
		groups[i] = strconv.FormatUint(uint64(g), 10)
	}
	s := fmt.Sprintf("%d:%d:%s", c.Uid, c.Gid, strings.Join(groups, ","))
	if c.NoSetGroups {
		s += ":nosetgroups"
	}
	return s
}

func parseCred(s string) (*syscall.Credential, error) {
	f := strings.Split(s, ":")
	if len(f) < 3 || len(f) > 4 || (len(f) == 4 && f[3] != "nosetgroups") {
		return nil, fmt.Errorf("bad credential %q", s)
	}
	uid, err := strconv.ParseUint(f[0], 10, 32)
	if err != nil {
		return nil, fmt.Errorf("bad uid in credential %q", s)
	}
	gid, err := strconv.ParseUint(f[1], 10, 32)
	if err != nil {
		return nil, fmt.Errorf("bad gid in credential %q", s)
	}
	c := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: len(f) == 4}
	if f[2] != "" {
		for _, g := range strings.Split(f[2], ",") {
			n, err := strconv.ParseUint(g, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("bad group in credential %q", s)
			}
			c.Groups = append(c.Groups, uint32(n))
		}
	}
	return c, nil
}

// RunShimIfRequested turns the process into the shim when os.Args[1] is
// ShimArg, and otherwise returns at once. Call it first thing in main (and in
// TestMain of tests that use the shim), before any goroutine or flag parsing.
// As the shim it never returns: it writes its pid into the cgroup's
// cgroup.procs, drops credentials if asked, and execs the target; on any
// error it writes the error to stderr (and to Start through the status pipe)
// and exits with status 127.
func RunShimIfRequested() {
	if len(os.Args) < 2 || os.Args[1] != ShimArg {
		return
	}
	// Pdeathsig and the exec must happen on one thread: the parent-death
	// signal is per thread.
	runtime.LockOSThread()
	var status *os.File
	err := runShim(os.Args, &status)
	fmt.Fprintf(os.Stderr, "gracewatch cgroup shim: %v\n", err)
	if status != nil {
		var errno syscall.Errno
		errors.As(err, &errno)
		fmt.Fprintf(status, "e%d:%v", int(errno), err)
	}
	os.Exit(127)
}

// runShim does the shim's work and returns only on error. args is
// [argv0, ShimArg, cgroup, options..., "--", target, targetArgs...].
func runShim(args []string, status **os.File) error {
	if len(args) < 3 {
		return errors.New("usage: <argv0> " + ShimArg + " <cgroup> [options] -- <program> [args]")
	}
	argv0, cg := args[0], args[2]
	rest := args[3:]
	var cred *syscall.Credential
	pdeathsig := 0
	for len(rest) > 0 && rest[0] != "--" {
		opt := rest[0]
		rest = rest[1:]
		name, val, _ := strings.Cut(opt, "=")
		switch name {
		case "-status-fd":
			fd, err := strconv.Atoi(val)
			if err != nil || fd < 3 {
				return fmt.Errorf("bad option %q", opt)
			}
			unix.CloseOnExec(fd)
			*status = os.NewFile(uintptr(fd), "status")
		case "-cred":
			c, err := parseCred(val)
			if err != nil {
				return err
			}
			cred = c
		case "-pdeathsig":
			n, err := strconv.Atoi(val)
			if err != nil {
				return fmt.Errorf("bad option %q", opt)
			}
			pdeathsig = n
		default:
			return fmt.Errorf("unknown option %q", opt)
		}
	}
	if len(rest) < 2 {
		return errors.New("no program after --")
	}
	target := rest[1]
	argv := append([]string{argv0}, rest[2:]...)

	procs := filepath.Join(cg, "cgroup.procs")
	if err := writeCgroupFile(procs, strconv.Itoa(os.Getpid())); err != nil {
		return fmt.Errorf("join cgroup %s: %w", cg, err)
	}
	if *status != nil {
		if _, err := io.WriteString(*status, shimJoined); err != nil {
			return fmt.Errorf("report to the agent: %w", err)
		}
	}
	if cred != nil {
		// syscall's Set* apply to every thread of the process.
		if !cred.NoSetGroups {
			groups := make([]int, len(cred.Groups))
			for i, g := range cred.Groups {
				groups[i] = int(g)
			}
			if err := syscall.Setgroups(groups); err != nil {
				return fmt.Errorf("setgroups %v: %w", groups, err)
			}
		}
		if err := syscall.Setgid(int(cred.Gid)); err != nil {
			return fmt.Errorf("setgid %d: %w", cred.Gid, err)
		}
		if err := syscall.Setuid(int(cred.Uid)); err != nil {
			return fmt.Errorf("setuid %d: %w", cred.Uid, err)
		}
	}
	if pdeathsig != 0 {
		if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(pdeathsig), 0, 0, 0); err != nil {
			return fmt.Errorf("set parent-death signal %d: %w", pdeathsig, err)
		}
	}
	err := syscall.Exec(target, argv, os.Environ())
	return fmt.Errorf("exec %s: %w", target, err)
}
