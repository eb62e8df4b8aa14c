// Package procfstest gives tests what this host's /proc says, parsed the way
// the agent parses it.
package procfstest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gracewatch/gracewatch/agent/procfs"
)

// Parse reads /proc/rel (for example "self/mountinfo" or "42/status")
// afresh and parses it with parse. It fails t when the file cannot be read
// or parsed. Safe for concurrent use.
func Parse[T any](t testing.TB, rel string, parse func([]byte) (T, error)) T {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("/proc", rel))
	if err != nil {
		t.Fatal(err)
	}
	v, err := parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// SelfMounts returns the mounts of the calling process, from
// /proc/self/mountinfo (see Parse).
func SelfMounts(t testing.TB) []procfs.Mount {
	t.Helper()
	return Parse(t, "self/mountinfo", procfs.ParseMountinfo)
}
