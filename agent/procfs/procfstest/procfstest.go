// Package procfstest gives tests what this host's /proc says, parsed the way
// the agent parses it.
package procfstest

import (
	"os"
	"testing"

	"github.com/gracewatch/gracewatch/agent/procfs"
)

// SelfMounts returns the mounts of the calling process, from
// /proc/self/mountinfo read afresh. It fails t when the file cannot be read
// or parsed. Safe for concurrent use.
func SelfMounts(t testing.TB) []procfs.Mount {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := procfs.ParseMountinfo(data)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}
