package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Foreign cgroups are the exec system's own job cgroups (Slurm's, Flux's):
// the agent observes them, read-only, and signals their processes only when
// the site allows it. On a cgroup v2 host they are watched through their
// cgroup.events like the agent's own. On a host where the exec system uses
// cgroup v1 (RHEL 8 sites; Slurm's proctrack/cgroup with CgroupPlugin=
// cgroup/v1 on a hybrid host such as Debian 12's) there is no cgroup.events
// and no populated flag: the processes are listed from cgroup.procs of the
// cgroup and its descendants instead, by polling (containerd/cgroups keeps
// v1 and v2 apart the same way, for the same reason).

// ErrNotAllowed is wrapped by the errors of ResolveForeign for a cgroup that
// no pattern of the allow-list ([teardown] foreign_cgroups) admits.
var ErrNotAllowed = errors.New("cgroup not in the allow-list")

// Foreign is a resolved foreign cgroup. It is a value.
type Foreign struct {
	// Path is the cgroup's absolute directory.
	Path string
	// Hierarchy is "" for cgroup v2, else the v1 hierarchy's controllers as
	// /proc/PID/cgroup names them ("freezer", "cpu,cpuacct",
	// "name=systemd").
	Hierarchy string
	// Rel is the cgroup's path within its hierarchy ("/slurm/uid_0/job_5"),
	// as /proc/PID/cgroup prints it.
	Rel string
}

// V1 reports whether f is in a cgroup v1 hierarchy.
func (f Foreign) V1() bool { return f.Hierarchy != "" }

// String is the /proc/PID/cgroup form: "0::/rel" for v2,
// "freezer:/rel" for v1.
func (f Foreign) String() string {
	if f.V1() {
		return f.Hierarchy + ":" + f.Rel
	}
	return "0::" + f.Rel
}

// V1Mount is one mounted cgroup v1 hierarchy.
type V1Mount struct {
	// Controllers as /proc/PID/cgroup names them: "freezer", "cpu,cpuacct",
	// "name=systemd".
	Controllers string
	// Mountpoint is where the hierarchy's root is mounted.
	Mountpoint string
}

// FindV1Mounts lists the cgroup v1 hierarchies mounted at their root in a
// mountinfo file (proc(5)): fstype "cgroup", controllers from the super
// options. A hierarchy mounted twice is listed once, at its first mount.
func FindV1Mounts(mountinfo io.Reader) ([]V1Mount, error) {
	sc := bufio.NewScanner(mountinfo)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	var out []V1Mount
	for sc.Scan() {
		line := sc.Text()
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		pf := strings.Fields(post)
		if len(pf) < 3 || pf[0] != "cgroup" {
			continue
		}
		f := strings.Fields(pre)
		if len(f) < 5 || f[3] != "/" {
			continue // a bind mount of a sub-hierarchy (containers): not the root
		}
		mp, err := unescapeMountinfo(f[4])
		if err != nil {
			return nil, fmt.Errorf("parse mountinfo: mount point %q: %w", f[4], err)
		}
		var ctrls []string
		for _, o := range strings.Split(pf[2], ",") {
			switch {
			case o == "rw" || o == "ro" || o == "xattr" || o == "clone_children" || o == "noprefix" ||
				o == "cpuset_v2_mode" || o == "favordynmods" || strings.HasPrefix(o, "release_agent="):
			default:
				ctrls = append(ctrls, o)
			}
		}
		if len(ctrls) == 0 {
			continue
		}
		c := strings.Join(ctrls, ",")
		if !slices.ContainsFunc(out, func(m V1Mount) bool { return sameControllers(m.Controllers, c) }) {
			out = append(out, V1Mount{Controllers: c, Mountpoint: filepath.Clean(mp)})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	return out, nil
}

// sameControllers compares two comma-separated controller lists as sets.
func sameControllers(a, b string) bool {
	x, y := strings.Split(a, ","), strings.Split(b, ",")
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// v1Mount finds the mounted v1 hierarchy of controllers: an exact match of
// the set, or the hierarchy one controller of a co-mounted set belongs to
// ("cpu" finds "cpu,cpuacct").
func (m *Manager) v1Mount(controllers string) (V1Mount, bool) {
	for _, v := range m.v1 {
		if sameControllers(v.Controllers, controllers) {
			return v, true
		}
	}
	if !strings.Contains(controllers, ",") {
		for _, v := range m.v1 {
			if slices.Contains(strings.Split(v.Controllers, ","), controllers) {
				return v, true
			}
		}
	}
	return V1Mount{}, false
}

// V1Mounts returns the cgroup v1 hierarchies found at New. Safe for
// concurrent use.
func (m *Manager) V1Mounts() []V1Mount { return slices.Clone(m.v1) }

// ResolveForeign turns a foreign cgroup as an exec system names it into a
// Foreign. Accepted forms:
//   - "0::/system.slice/x" or "freezer:/slurm/uid_0/job_5" (with or without
//     the leading "N:" hierarchy number): the form /proc/PID/cgroup prints;
//   - an absolute directory below the cgroup2 mount or below a mounted v1
//     hierarchy;
//   - a path relative to the cgroup2 mount.
//
// A cgroup may not exist yet, v2 as v1: exec systems create it when the
// job's first step starts, which can be after the job is registered
// (Slurm's cgroup/v1 and cgroup/v2 plugins alike). A v2 cgroup that exists
// must be one (have a cgroup.events); one that does not must lie below an
// existing cgroup directory, not a file (Watch awaits it there). The
// hierarchy root itself is refused. It only reads and is safe for
// concurrent use.
func (m *Manager) ResolveForeign(spec string) (Foreign, error) {
	s := strings.TrimSpace(spec)
	if s == "" {
		return Foreign{}, errors.New("resolve cgroup: empty path")
	}
	if strings.IndexByte(s, 0) >= 0 || strings.ContainsAny(s, "\n\r") {
		return Foreign{}, fmt.Errorf("resolve cgroup %q: contains a NUL or newline", spec)
	}
	var f Foreign
	switch {
	case !strings.HasPrefix(s, "/") && strings.Contains(s, ":/"):
		ctrl, rel, _ := strings.Cut(s, ":/")
		rel = "/" + rel
		// "N:controllers" or "controllers"; "0:" and "" are v2.
		if n, rest, ok := strings.Cut(ctrl, ":"); ok {
			if _, err := strconv.Atoi(n); err != nil {
				return Foreign{}, fmt.Errorf("resolve cgroup %q: want N:controllers:/path, controllers:/path or an absolute path", spec)
			}
			ctrl = rest
		}
		rel = path.Clean(rel)
		if ctrl == "" {
			f = Foreign{Path: filepath.Join(m.mount, rel), Rel: rel}
			break
		}
		v, ok := m.v1Mount(ctrl)
		if !ok {
			return Foreign{}, fmt.Errorf("resolve cgroup %q: no cgroup v1 hierarchy %q is mounted (mounted: %s)", spec, ctrl, m.v1Names())
		}
		f = Foreign{Path: filepath.Join(v.Mountpoint, rel), Hierarchy: v.Controllers, Rel: rel}
	case filepath.IsAbs(s):
		p := filepath.Clean(s)
		if within(p, m.mount) {
			f = Foreign{Path: p, Rel: "/" + strings.TrimPrefix(strings.TrimPrefix(p, m.mount), "/")}
			break
		}
		found := false
		for _, v := range m.v1 {
			if within(p, v.Mountpoint) {
				f = Foreign{Path: p, Hierarchy: v.Controllers, Rel: "/" + strings.TrimPrefix(strings.TrimPrefix(p, v.Mountpoint), "/")}
				found = true
				break
			}
		}
		if !found {
			return Foreign{}, fmt.Errorf("resolve cgroup %s: not below the cgroup2 mount %s nor a cgroup v1 hierarchy (%s)", spec, m.mount, m.v1Names())
		}
	default:
		rel := path.Clean("/" + s)
		f = Foreign{Path: filepath.Join(m.mount, rel), Rel: rel}
	}
	if f.Rel == "/" {
		return Foreign{}, fmt.Errorf("resolve cgroup %s: refusing the root of the hierarchy", spec)
	}
	if !f.V1() {
		if err := m.checkV2(f.Path); err != nil {
			return Foreign{}, fmt.Errorf("resolve cgroup %s: %w", spec, err)
		}
	}
	return f, nil
}

// checkV2 accepts the v2 cgroup at p when it exists (has a cgroup.events)
// or when its nearest existing ancestor is a directory: a cgroup yet to be
// created there.
func (m *Manager) checkV2(p string) error {
	_, err := os.Stat(filepath.Join(p, "cgroup.events"))
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if _, serr := os.Stat(p); !errors.Is(serr, fs.ErrNotExist) {
		return err // there, but no cgroup (or unreadable)
	}
	a := filepath.Dir(p)
	for ; a != m.mount; a = filepath.Dir(a) {
		st, serr := os.Stat(a)
		if errors.Is(serr, fs.ErrNotExist) {
			continue
		}
		if serr != nil {
			return serr
		}
		if !st.IsDir() {
			return fmt.Errorf("%s is not a cgroup, so nothing can be created below it", a)
		}
		break
	}
	return nil
}

func (m *Manager) v1Names() string {
	if len(m.v1) == 0 {
		return "none"
	}
	var n []string
	for _, v := range m.v1 {
		n = append(n, v.Controllers)
	}
	return strings.Join(n, " ")
}

// PopulatedV1 reports whether the v1 cgroup at path or a descendant lists a
// process in its cgroup.procs. v1 has no populated flag: an empty list is
// the best evidence there is (a process that exits between two reads is
// missed by neither: it was listed, or it is gone). A cgroup that does not
// exist (not yet created, or removed) is not populated. It reads through the
// Manager's FS (Options.FS) and is safe for concurrent use.
func (m *Manager) PopulatedV1(path string) (bool, error) {
	pids, err := m.ProcsV1(path, 1)
	return len(pids) > 0, err
}

// ProcsV1 lists up to max (0: all) pids of the v1 cgroup at path and its
// descendants, through the Manager's FS. A missing cgroup has none.
func (m *Manager) ProcsV1(p string, max int) ([]int, error) {
	rel := strings.TrimPrefix(filepath.Clean(p), "/")
	var pids []int
	err := fs.WalkDir(m.fsys, rel, func(q string, d fs.DirEntry, err error) error {
		if err != nil {
			if vanished(err) {
				if q == rel {
					return fs.SkipAll
				}
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		data, err := fs.ReadFile(m.fsys, q+"/cgroup.procs")
		if err != nil {
			if vanished(err) {
				return nil
			}
			return err
		}
		for _, line := range strings.Split(string(data), "\n") {
			if n, err := strconv.Atoi(strings.TrimSpace(line)); err == nil && n > 0 {
				pids = append(pids, n)
				if max > 0 && len(pids) >= max {
					return fs.SkipAll
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list processes of cgroup %s: %w", p, err)
	}
	slices.Sort(pids)
	return slices.Compact(pids), nil
}

// AllowList is the set of foreign cgroups the agent may observe
// ([teardown] foreign_cgroups). A pattern admits a cgroup when it matches
// the cgroup or one of its ancestors, so a pattern names a subtree. It is a
// value, safe for concurrent use.
type AllowList struct {
	pats []allowPattern
}

type allowPattern struct {
	text      string
	hierarchy string // "" for v2, else v1 controllers
	abs       bool   // match against Path instead of (hierarchy, Rel)
	glob      string
}

// ParseAllowList checks the patterns of [teardown] foreign_cgroups: each is
// "0::/glob" (cgroup v2), "controllers:/glob" (a v1 hierarchy, e.g.
// "freezer:/slurm*") or an absolute directory glob ("/sys/fs/cgroup/
// freezer/slurm*"), with the wildcards of path.Match ('*' stays within one
// path segment). The error names the pattern.
func ParseAllowList(patterns []string) (AllowList, error) {
	var a AllowList
	for i, p := range patterns {
		ap := allowPattern{text: p}
		switch {
		case p == "":
			return AllowList{}, fmt.Errorf("pattern %d is empty", i+1)
		case strings.HasPrefix(p, "/"):
			ap.abs, ap.glob = true, path.Clean(p)
		case strings.Contains(p, ":/"):
			ctrl, rel, _ := strings.Cut(p, ":/")
			if n, rest, ok := strings.Cut(ctrl, ":"); ok {
				if _, err := strconv.Atoi(n); err != nil {
					return AllowList{}, fmt.Errorf("pattern %q: want 0::/glob, controllers:/glob or an absolute glob", p)
				}
				ctrl = rest
			}
			ap.hierarchy, ap.glob = ctrl, path.Clean("/"+rel)
		default:
			return AllowList{}, fmt.Errorf("pattern %q: want 0::/glob, controllers:/glob or an absolute glob", p)
		}
		if _, err := path.Match(ap.glob, "/"); err != nil {
			return AllowList{}, fmt.Errorf("pattern %q: %w", p, err)
		}
		a.pats = append(a.pats, ap)
	}
	return a, nil
}

// Empty reports whether no pattern is configured (every foreign cgroup is
// refused).
func (a AllowList) Empty() bool { return len(a.pats) == 0 }

// String lists the patterns.
func (a AllowList) String() string {
	var s []string
	for _, p := range a.pats {
		s = append(s, strconv.Quote(p.text))
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// Allows reports whether f, or one of its ancestors, matches a pattern.
func (a AllowList) Allows(f Foreign) bool {
	for _, p := range a.pats {
		target := f.Rel
		switch {
		case p.abs:
			target = f.Path
		case p.hierarchy == "":
			if f.V1() {
				continue
			}
		default:
			if !f.V1() || !sameControllers(p.hierarchy, f.Hierarchy) && !slices.Contains(strings.Split(f.Hierarchy, ","), p.hierarchy) {
				continue
			}
		}
		for q := target; ; q = path.Dir(q) {
			if ok, _ := path.Match(p.glob, q); ok {
				return true
			}
			if q == "/" || q == "." {
				break
			}
		}
	}
	return false
}

// ResolveAllowed resolves spec (ResolveForeign) and checks it against a.
// The error for a cgroup outside the list wraps ErrNotAllowed and names
// the cgroup and the patterns.
func (m *Manager) ResolveAllowed(spec string, a AllowList) (Foreign, error) {
	f, err := m.ResolveForeign(spec)
	if err != nil {
		return Foreign{}, err
	}
	if !a.Allows(f) {
		if a.Empty() {
			return Foreign{}, fmt.Errorf("cgroup %s (%s): %w: [teardown] foreign_cgroups is empty, so no foreign cgroup may be observed", f, f.Path, ErrNotAllowed)
		}
		return Foreign{}, fmt.Errorf("cgroup %s (%s): %w: it matches none of [teardown] foreign_cgroups %s", f, f.Path, ErrNotAllowed, a)
	}
	return f, nil
}
