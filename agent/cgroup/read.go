// Package cgroup manages the node agent's cgroup v2 subtree: it finds the
// mount, creates job cgroups, starts processes directly inside them, watches
// their cgroup.events with one inotify instance, and kills them. It also reads
// foreign cgroups (Slurm's, Flux's) without ever writing to them.
package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Events is the content of a cgroup's cgroup.events.
type Events struct {
	Populated bool
	Frozen    bool
}

// ReadKV reads a flat-keyed cgroup file ("key value" lines) such as
// cgroup.events or cgroup.stat. A file of a cgroup that is gone, or being
// removed (ENODEV), gives an error that wraps fs.ErrNotExist (goneErr). It
// only reads and is safe for concurrent use.
func ReadKV(file string) (map[string]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, goneErr(err)
	}
	defer f.Close()
	return readKV(f)
}

// readKV reads the open cgroup file f (see ReadKV).
func readKV(f *os.File) (map[string]string, error) {
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, goneErr(err) // an *fs.PathError naming the file
	}
	m := make(map[string]string)
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m, nil
}

// ReadEvents reads path/cgroup.events. Its error wraps fs.ErrNotExist when
// the cgroup is gone or being removed (ReadKV). It only reads and is safe
// for concurrent use (typically from a Watch callback).
func ReadEvents(path string) (Events, error) {
	m, err := ReadKV(filepath.Join(path, "cgroup.events"))
	if err != nil {
		return Events{}, fmt.Errorf("read cgroup events of %s: %w", path, err)
	}
	p, ok := m["populated"]
	if !ok {
		return Events{}, fmt.Errorf("read cgroup events of %s: no populated line", path)
	}
	return Events{Populated: p == "1", Frozen: m["frozen"] == "1"}, nil
}

// Populated reports whether the cgroup at path or any descendant holds a
// process. This, not an empty cgroup.procs, is the proof that a cgroup is
// empty. A cgroup that does not exist, or is being removed, is not
// populated. It only reads and is safe for concurrent use.
func Populated(path string) (bool, error) {
	ev, err := ReadEvents(path)
	if vanished(err) {
		return false, nil
	}
	return ev.Populated, err
}

// vanished reports whether err says a cgroup was removed while it was
// read: ENOENT, or ENODEV from a file of a cgroup being removed (its
// processes are gone with it).
func vanished(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENODEV)
}

// goneErr is err, wrapping fs.ErrNotExist too when it is ENODEV: kernfs
// answers ENODEV for a file of a cgroup being removed, and callers test a
// cgroup's absence with errors.Is(err, fs.ErrNotExist), as for ENOENT.
func goneErr(err error) error {
	if errors.Is(err, syscall.ENODEV) && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w (%w: the cgroup is being removed)", err, fs.ErrNotExist)
	}
	return err
}

// Procs lists the pids of the cgroup at path and all its descendants, sorted
// and without duplicates. A cgroup that vanishes during the walk is skipped.
// The list is a snapshot: processes fork and exit meanwhile, and an empty
// list does not prove an empty cgroup (see Populated). It only reads and is
// safe for concurrent use.
func Procs(path string) ([]int, error) {
	var pids []int
	err := filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if vanished(err) && p != path {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		data, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			if vanished(err) {
				return nil
			}
			return err
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			if n, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil {
				pids = append(pids, n)
			}
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("list processes of cgroup %s: %w", path, err)
	}
	slices.Sort(pids)
	return slices.Compact(pids), nil
}
