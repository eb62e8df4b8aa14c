package cgroup_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gracewatch/gracewatch/agent/cgroup"
)

func TestFindMount(t *testing.T) {
	checkFixtures(t, "FindMount", cgroup.FindMount, []fixtureCase{
		{name: "pure v2", fixture: "mountinfo-purev2", want: "/sys/fs/cgroup"},
		{name: "hybrid", fixture: "mountinfo-hybrid", want: "/sys/fs/cgroup/unified"},
		{name: "escaped path", fixture: "mountinfo-escaped", want: "/mnt/cgroup v2\ttab\\slash"},
		{name: "container prefers hierarchy root", fixture: "mountinfo-container", want: "/host/cgroup"},
		{name: "v1 only", fixture: "mountinfo-v1only", wantErr: cgroup.ErrNoCgroup2},
	})
}

func TestFindMountMalformed(t *testing.T) {
	tests := []struct{ name, in string }{
		{"short line", "41 31 0:38 / - cgroup2 cgroup2 rw\n"},
		{"truncated escape", "41 31 0:38 / /a\\04 rw - cgroup2 cgroup2 rw\n"},
		{"bad escape", "41 31 0:38 / /a\\9zz rw - cgroup2 cgroup2 rw\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := cgroup.FindMount(strings.NewReader(tt.in)); err == nil {
				t.Fatalf("FindMount = %q, want an error", got)
			}
		})
	}
}

func TestOwnCgroup(t *testing.T) {
	checkFixtures(t, "OwnCgroup", cgroup.OwnCgroup, []fixtureCase{
		{name: "pure v2", fixture: "cgroup-purev2", want: "/system.slice/gracewatch-nodeagent.service"},
		{name: "hybrid", fixture: "cgroup-hybrid", want: "/system.slice/gracewatch-nodeagent.service"},
		{name: "root", fixture: "cgroup-root", want: "/"},
		{name: "v1 only", fixture: "cgroup-v1only", wantErr: cgroup.ErrNoCgroup2},
	})
}

// fixtureCase is one case of a parser of a /proc file kept in testdata.
type fixtureCase struct {
	name    string
	fixture string // file in testdata
	want    string
	wantErr error // when set, the error expected (errors.Is) instead of want
}

// checkFixtures runs parse, called fn in failures, over each case's fixture.
func checkFixtures(t *testing.T, fn string, parse func(io.Reader) (string, error), tests []fixtureCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", tt.fixture))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got, err := parse(f)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("%s = %q, %v; want error %v", fn, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("%s = %q, %v; want %q", fn, got, err, tt.want)
			}
		})
	}
}
