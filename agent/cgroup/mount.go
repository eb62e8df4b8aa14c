package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ErrNoCgroup2 means the host has no cgroup v2 hierarchy (a v1-only host), or
// the process is not attached to one.
var ErrNoCgroup2 = errors.New("no cgroup v2 hierarchy")

// FindMount returns the mount point of the cgroup2 file system from the
// content of /proc/<pid>/mountinfo. It is a pure parser and safe for
// concurrent use. The file system type is the first field after the " - "
// separator; the mount point is unescaped (\040 for a space, \011, \012, \134).
// If several cgroup2 mounts exist, one that shows the root of the hierarchy
// ("/" as its root field) is preferred, then the first in mount order. It
// returns an error wrapping ErrNoCgroup2 when there is none.
func FindMount(mountinfo io.Reader) (string, error) {
	sc := bufio.NewScanner(mountinfo)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	var first string
	for sc.Scan() {
		line := sc.Text()
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		fstype, _, _ := strings.Cut(post, " ")
		if fstype != "cgroup2" {
			continue
		}
		// Fields before the separator: id parent major:minor root mountpoint
		// options [optional fields...].
		f := strings.Fields(pre)
		if len(f) < 5 {
			return "", fmt.Errorf("parse mountinfo: short cgroup2 line %q", line)
		}
		mp, err := unescapeMountinfo(f[4])
		if err != nil {
			return "", fmt.Errorf("parse mountinfo: mount point %q: %w", f[4], err)
		}
		if f[3] == "/" {
			return mp, nil
		}
		if first == "" {
			first = mp
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read mountinfo: %w", err)
	}
	if first != "" {
		return first, nil
	}
	return "", fmt.Errorf("find cgroup2 mount: %w", ErrNoCgroup2)
}

// unescapeMountinfo undoes the kernel's octal escaping of space, tab, newline
// and backslash (show_mountinfo's mangle) in a mountinfo path field.
func unescapeMountinfo(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+4 > len(s) {
			return "", fmt.Errorf("truncated escape at offset %d", i)
		}
		n, err := strconv.ParseUint(s[i+1:i+4], 8, 8)
		if err != nil {
			return "", fmt.Errorf("bad escape %q at offset %d", s[i:i+4], i)
		}
		b.WriteByte(byte(n))
		i += 3
	}
	return b.String(), nil
}

// OwnCgroup returns the cgroup v2 path (relative to the cgroup2 mount, with a
// leading "/") from the "0::" line of the content of /proc/<pid>/cgroup. It is
// a pure parser and safe for concurrent use. It returns an error wrapping
// ErrNoCgroup2 when there is no "0::" line (a v1-only host).
func OwnCgroup(procSelfCgroup io.Reader) (string, error) {
	sc := bufio.NewScanner(procSelfCgroup)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		p, ok := strings.CutPrefix(sc.Text(), "0::")
		if !ok {
			continue
		}
		if !strings.HasPrefix(p, "/") {
			return "", fmt.Errorf("parse cgroup file: 0:: path %q is not absolute", p)
		}
		return p, nil
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read cgroup file: %w", err)
	}
	return "", fmt.Errorf("no 0:: line in cgroup file: %w", ErrNoCgroup2)
}
