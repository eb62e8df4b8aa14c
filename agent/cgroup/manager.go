package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrNotOwned is wrapped by the errors of calls that would write to (or
// signal through cgroup.kill) a cgroup outside the agent's subtree, or to the
// subtree's root itself.
var ErrNotOwned = errors.New("cgroup not owned by the agent")

// ErrClosed is returned by Watch after Close.
var ErrClosed = errors.New("cgroup manager closed")

// AgentLeaf is the name of the leaf cgroup, below a delegated Root, that the
// agent moves itself into (see Options.Root).
const AgentLeaf = "agent"

// Features lists the kernel features the Manager found. It is a value: it does
// not change after New.
type Features struct {
	// Kill: cgroup.kill exists (Linux 5.14+), so Kill can kill a whole
	// subtree atomically, forks included.
	Kill bool
	// Freeze: cgroup.freeze exists (Linux 5.2+).
	Freeze bool
	// CgroupFD: clone3 accepts CLONE_INTO_CGROUP (Linux 5.7+, and no seccomp
	// filter refusing clone3), so Start places a process in its cgroup at
	// fork time. Without it Start uses the shim (see ShimArg).
	CgroupFD bool
}

// Options configures New. The zero value detects everything from /proc and
// expects a delegated cgroup (systemd Delegate=yes).
type Options struct {
	// Mount is the cgroup2 mount point. "" detects it from
	// ProcRoot/self/mountinfo (see FindMount). Either way it must be a cgroup2
	// file system (statfs magic CGROUP2_SUPER_MAGIC).
	Mount string
	// Root is the absolute path of the subtree the agent owns, e.g.
	// /sys/fs/cgroup/gracewatch; it is created if missing and must lie below
	// Mount. "" uses the agent's own cgroup (the 0:: line of
	// ProcRoot/self/cgroup), as under systemd with Delegate=yes: the agent
	// then moves itself into Root/agent (AgentLeaf), because a cgroup with
	// children cannot also hold processes once controllers are enabled.
	Root string
	// ProcRoot is the procfs mount; "" means /proc.
	ProcRoot string
	// Logger receives the manager's records with component=cgroup; nil
	// discards them.
	Logger *slog.Logger
	// ForceShim makes Start use the shim even when CgroupFD is available
	// (tests of the fallback path).
	ForceShim bool
	// ShimPath is the executable Start re-executes as the shim; "" means
	// /proc/self/exe. Its main must call RunShimIfRequested first.
	ShimPath string
	// FS is the file system through which cgroup v1 hierarchies are read
	// (PopulatedV1, ProcsV1), rooted at "/"; nil means the host's. Tests
	// count or fake reads through it.
	FS fs.FS
}

// Manager owns one cgroup v2 subtree (Root): it creates, starts processes in,
// kills and removes cgroups there, and only there. It also reads, watches and
// (when the caller decides so) signals foreign cgroups below the same mount,
// without writing to them. All methods are safe for concurrent use. Methods
// block only on short file system and process operations, except where noted.
type Manager struct {
	mount     string
	root      string
	procRoot  string
	log       *slog.Logger
	feat      Features
	forceShim bool
	shimPath  string
	w         *watcher
	v1        []V1Mount // cgroup v1 hierarchies mounted beside cgroup2 (hybrid hosts)
	fsys      fs.FS     // reads of v1 hierarchies
}

// New detects (or checks) the cgroup2 mount, prepares Root, probes Features,
// moves the agent into Root/agent when Root is delegated, and starts the
// manager's single inotify watcher goroutine. Close the Manager to stop it.
// On error nothing is left running.
func New(opts Options) (*Manager, error) {
	ok := false
	procRoot := opts.ProcRoot
	if procRoot == "" {
		procRoot = "/proc"
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "cgroup")

	mount := opts.Mount
	if mount == "" {
		// Direct: gopsutil has no cgroup v2 mount detection (and its
		// disk.Partitions reads init's mountinfo, not the agent's).
		mi := filepath.Join(procRoot, "self", "mountinfo")
		f, err := os.Open(mi)
		if err != nil {
			return nil, fmt.Errorf("detect cgroup2 mount: %w", err)
		}
		mount, err = FindMount(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("detect cgroup2 mount from %s: %w", mi, err)
		}
	}
	if !filepath.IsAbs(mount) {
		return nil, fmt.Errorf("cgroup2 mount %q is not an absolute path", mount)
	}
	mount = filepath.Clean(mount)
	var st unix.Statfs_t
	if err := unix.Statfs(mount, &st); err != nil {
		return nil, fmt.Errorf("statfs cgroup2 mount %s: %w", mount, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return nil, fmt.Errorf("%s is not a cgroup2 file system (statfs type %#x): %w", mount, st.Type, ErrNoCgroup2)
	}

	m := &Manager{
		mount:     mount,
		procRoot:  procRoot,
		log:       log,
		forceShim: opts.ForceShim,
		shimPath:  opts.ShimPath,
	}
	if m.shimPath == "" {
		m.shimPath = "/proc/self/exe"
	}
	m.fsys = opts.FS
	if m.fsys == nil {
		m.fsys = os.DirFS("/")
	}
	// The v1 hierarchies an exec system may keep its job cgroups in (a
	// hybrid host). None found is not an error: foreign v1 cgroups are then
	// refused by name.
	if f, err := os.Open(filepath.Join(procRoot, "self", "mountinfo")); err == nil {
		m.v1, err = FindV1Mounts(f)
		f.Close()
		if err != nil {
			log.Warn("cannot list cgroup v1 hierarchies", "err", err)
		}
	}

	delegated := opts.Root == ""
	alreadyMoved := false
	if delegated {
		own, err := m.ownCgroup()
		if err != nil {
			return nil, err
		}
		if own == "/" {
			return nil, fmt.Errorf("the agent runs in the root cgroup of %s: set a root (e.g. %s)",
				mount, filepath.Join(mount, "gracewatch"))
		}
		// An earlier New in this process (a reload) already moved the agent
		// into its leaf: the delegated root is the leaf's parent.
		if filepath.Base(own) == AgentLeaf {
			own = filepath.Dir(own)
			alreadyMoved = true
		}
		m.root = filepath.Join(mount, own)
	} else {
		if !filepath.IsAbs(opts.Root) {
			return nil, fmt.Errorf("cgroup root %q is not an absolute path", opts.Root)
		}
		m.root = filepath.Clean(opts.Root)
		if !within(m.root, mount) || m.root == mount {
			return nil, fmt.Errorf("cgroup root %s is not below the cgroup2 mount %s", m.root, mount)
		}
		if !exists(m.root) {
			if err := os.MkdirAll(m.root, 0o755); err != nil {
				return nil, fmt.Errorf("create cgroup root %s: %w", m.root, err)
			}
			// Undo on a later failure (parents made by MkdirAll stay).
			defer func() {
				if !ok {
					_ = unix.Rmdir(m.root)
				}
			}()
		}
	}
	if _, err := os.Stat(filepath.Join(m.root, "cgroup.events")); err != nil {
		return nil, fmt.Errorf("cgroup root %s: %w", m.root, err)
	}
	m.feat.Kill = exists(filepath.Join(m.root, "cgroup.kill"))
	m.feat.Freeze = exists(filepath.Join(m.root, "cgroup.freeze"))
	m.feat.CgroupFD = probeCgroupFD()

	if delegated && !alreadyMoved {
		if err := m.moveSelf(); err != nil {
			return nil, err
		}
	}

	w, err := newWatcher(log, mount)
	if err != nil {
		return nil, err
	}
	m.w = w
	if !m.feat.CgroupFD {
		log.Warn("clone3(CLONE_INTO_CGROUP) unavailable: processes start through the shim", "shim", m.shimPath)
	}
	log.Info("cgroup manager ready", "mount", mount, "root", m.root, "delegated", delegated,
		"cgroup_kill", m.feat.Kill, "cgroup_freeze", m.feat.Freeze,
		"clone_into_cgroup", m.feat.CgroupFD, "shim", m.useShim())
	ok = true
	return m, nil
}

// moveSelf moves the agent (all its threads) into Root/AgentLeaf.
func (m *Manager) moveSelf() error {
	leaf := filepath.Join(m.root, AgentLeaf)
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create agent cgroup %s: %w", leaf, err)
	}
	if err := writeCgroupFile(filepath.Join(leaf, "cgroup.procs"), strconv.Itoa(os.Getpid())); err != nil {
		return fmt.Errorf("move agent pid %d into %s: %w", os.Getpid(), leaf, err)
	}
	m.log.Info("moved agent into its leaf cgroup", "cgroup", leaf, "pid", os.Getpid())
	return nil
}

// Mount returns the cgroup2 mount point. Safe for concurrent use.
func (m *Manager) Mount() string { return m.mount }

// Root returns the absolute path of the subtree the agent owns. Safe for
// concurrent use.
func (m *Manager) Root() string { return m.root }

// Features returns what New probed. Safe for concurrent use.
func (m *Manager) Features() Features { return m.feat }

// Create makes the cgroup Root/rel and its missing parents and returns its
// absolute path. rel must be relative and clean, without "..". Creating an
// existing cgroup is not an error. Safe for concurrent use.
func (m *Manager) Create(rel string) (string, error) {
	if rel == "" || rel == "." || filepath.IsAbs(rel) || filepath.Clean(rel) != rel ||
		rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("create cgroup %q: want a clean relative path below %s", rel, m.root)
	}
	p := filepath.Join(m.root, rel)
	if err := os.MkdirAll(p, 0o755); err != nil {
		return "", fmt.Errorf("create cgroup %s: %w", p, err)
	}
	return p, nil
}

// Owns reports whether path (absolute, cleaned first) is Root or below it.
// Safe for concurrent use; it does not touch the file system.
func (m *Manager) Owns(path string) bool {
	if !filepath.IsAbs(path) {
		return false
	}
	return within(filepath.Clean(path), m.root)
}

// Resolve turns a foreign cgroup, given as an absolute path below Mount or as
// a path relative to Mount, into an absolute path. The cgroup must exist (have
// a cgroup.events file); the error names the path otherwise. It only reads.
// Safe for concurrent use.
func (m *Manager) Resolve(p string) (string, error) {
	abs := p
	if !filepath.IsAbs(p) {
		abs = filepath.Join(m.mount, p)
	}
	abs = filepath.Clean(abs)
	if !within(abs, m.mount) || abs == m.mount {
		return "", fmt.Errorf("resolve cgroup %s: not below the cgroup2 mount %s", p, m.mount)
	}
	if _, err := os.Stat(filepath.Join(abs, "cgroup.events")); err != nil {
		return "", fmt.Errorf("resolve cgroup %s: %w", p, err)
	}
	return abs, nil
}

// Close stops the watcher goroutine and releases the inotify instance; no
// callback runs after it returns. It is idempotent and safe for concurrent
// use, but must not be called from a Watch callback (it waits for the
// watcher goroutine). Processes and cgroups are left as they are.
func (m *Manager) Close() error {
	return m.w.close()
}

// useShim tells whether Start goes through the shim.
func (m *Manager) useShim() bool { return m.forceShim || !m.feat.CgroupFD }

// below checks that path is an absolute cgroup strictly below Mount and
// returns it cleaned. It is the check for read-only and signal operations,
// which are allowed on foreign cgroups.
func (m *Manager) below(op, path string) (string, error) {
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("%s: cgroup %q is not an absolute path", op, path)
	}
	p := filepath.Clean(path)
	if within(p, m.mount) && p != m.mount {
		return p, nil
	}
	if v, ok := m.v1Of(p); ok && p != v.Mountpoint {
		return p, nil
	}
	return "", fmt.Errorf("%s: cgroup %s is not below the cgroup2 mount %s nor a cgroup v1 hierarchy", op, p, m.mount)
}

// v1Of returns the v1 hierarchy the clean absolute path p lies in.
func (m *Manager) v1Of(p string) (V1Mount, bool) {
	for _, v := range m.v1 {
		if within(p, v.Mountpoint) {
			return v, true
		}
	}
	return V1Mount{}, false
}

// owned checks that path is strictly below Root and does not hold the agent
// itself, and returns it cleaned. It guards every writing operation.
func (m *Manager) owned(op, path string) (string, error) {
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("%s: cgroup %q is not an absolute path: %w", op, path, ErrNotOwned)
	}
	p := filepath.Clean(path)
	if p == m.root {
		return "", fmt.Errorf("%s: refusing the agent's root cgroup %s itself, use a child: %w", op, p, ErrNotOwned)
	}
	if !within(p, m.root) {
		return "", fmt.Errorf("%s: cgroup %s is outside the agent's subtree %s: %w", op, p, m.root, ErrNotOwned)
	}
	if err := m.refuseSelf(op, p); err != nil {
		return "", err
	}
	return p, nil
}

// refuseSelf fails when the agent's own cgroup is p or below it.
func (m *Manager) refuseSelf(op, p string) error {
	own, err := m.ownCgroup()
	if err != nil {
		return fmt.Errorf("%s: cgroup %s: cannot rule out that it holds the agent: %w", op, p, err)
	}
	if within(filepath.Join(m.mount, own), p) {
		return fmt.Errorf("%s: refusing cgroup %s: it holds the agent (pid %d)", op, p, os.Getpid())
	}
	return nil
}

// ownCgroup reads the agent's own cgroup v2 path (relative to the mount).
func (m *Manager) ownCgroup() (string, error) {
	return m.pidCgroup("self")
}

// pidCgroup reads ProcRoot/<pid>/cgroup and returns its 0:: path. Direct:
// gopsutil has no reader of a process's cgroup v2 path.
func (m *Manager) pidCgroup(pid string) (string, error) {
	file := filepath.Join(m.procRoot, pid, "cgroup")
	f, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", file, err)
	}
	defer f.Close()
	own, err := OwnCgroup(f)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", file, err)
	}
	return own, nil
}

// within reports whether the clean absolute path p is dir or below it.
func within(p, dir string) bool {
	if dir == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

func exists(file string) bool {
	_, err := os.Stat(file)
	return err == nil
}

// writeCgroupFile writes s to an existing cgroup interface file. It never
// creates or truncates (os.WriteFile would create a regular file when the
// path is not a cgroup).
func writeCgroupFile(file, s string) error {
	f, err := os.OpenFile(file, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(s)
	cerr := f.Close()
	if werr != nil {
		return werr
	}
	return cerr
}

// cloneArgs mirrors struct clone_args of <linux/sched.h> up to the cgroup
// field (CLONE_ARGS_SIZE_VER2, 88 bytes).
type cloneArgs struct {
	flags, pidfd, childTID, parentTID, exitSignal, stack, stackSize, tls, setTID, setTIDSize, cgroup uint64
}

// probeCgroupFD tells whether clone3 accepts CLONE_INTO_CGROUP, the syscall
// and flag that os/exec uses for SysProcAttr.UseCgroupFD. os/exec cannot
// retry a failed Start, so this is decided once, up front, with the same
// syscall: clone3(CLONE_INTO_CGROUP) with a cgroup fd that can never be open
// (INT_MAX is above the kernel's largest possible fd, sysctl_nr_open_max).
// Kernels that know the flag fail with EBADF when they look the fd up, before
// any process exists; older ones fail with EINVAL (unknown flag) or E2BIG
// (short struct), and kernels without clone3, or a seccomp filter refusing it
// (Docker's default profile), with ENOSYS.
func probeCgroupFD() bool {
	args := cloneArgs{
		flags:      unix.CLONE_INTO_CGROUP,
		exitSignal: uint64(unix.SIGCHLD),
		cgroup:     math.MaxInt32,
	}
	r, _, errno := unix.RawSyscall(unix.SYS_CLONE3, uintptr(unsafe.Pointer(&args)), unsafe.Sizeof(args), 0)
	switch {
	case errno == unix.EBADF:
		return true
	case errno != 0:
		return false
	case r == 0:
		// Unreachable (see above); a child must not run Go code.
		unix.RawSyscall(unix.SYS_EXIT_GROUP, 127, 0, 0)
		return false
	default:
		var ws unix.WaitStatus
		_, _ = unix.Wait4(int(r), &ws, 0, nil)
		return false
	}
}
