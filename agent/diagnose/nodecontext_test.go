package diagnose

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/procfs"
)

// fuseCtl reads the agent's own mountinfo: where fusectl is mounted, that it
// is not, or that it cannot tell.
func TestFuseCtlFromMountinfo(t *testing.T) {
	base, err := os.ReadFile("testdata/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, extra string
		missing     bool
		want        string
		wantErr     string
	}{
		{name: "not mounted", want: FuseCtlNotMounted},
		{name: "mounted", extra: "90 23 0:40 / /sys/fs/fuse/connections rw,nosuid,nodev,noexec,relatime - fusectl fusectl rw\n",
			want: "/sys/fs/fuse/connections"},
		{name: "mounted elsewhere", extra: "91 1 0:40 / /run/fuse\\040ctl rw,relatime - fusectl none rw\n",
			want: "/run/fuse ctl"},
		{name: "unreadable", missing: true, want: "", wantErr: "mountinfo unreadable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.MkdirAll(filepath.Join(root, "self"), 0o755); err != nil {
				t.Fatal(err)
			}
			if !tt.missing {
				data := append(append([]byte{}, base...), tt.extra...)
				if err := os.WriteFile(filepath.Join(root, "self/mountinfo"), data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			s := NewSnapshotter(Options{Proc: procfs.New(procfs.Options{Root: root, Timeout: time.Second}),
				KmsgPath: "testdata/kmsg", HungTaskPath: filepath.Join(root, "none")})
			r := &Report{}
			if got := s.fuseCtl(context.Background(), r); got != tt.want {
				t.Errorf("fuseCtl = %q, want %q", got, tt.want)
			}
			if got := strings.Join(r.Errors, "\n"); !strings.Contains(got, tt.wantErr) || (tt.wantErr == "" && got != "") {
				t.Errorf("errors %q, want %q", got, tt.wantErr)
			}
		})
	}
}

// The node's facts come from Options.Host (gopsutil in the agent); the
// load average string is made from them, and their errors are the report's.
func TestNodeContextHost(t *testing.T) {
	root := t.TempDir()
	host := func(context.Context) HostFacts {
		return HostFacts{Load1: 0.5, Load5: 0.25, Load15: 2, Errors: []string{"memory unreadable: no"}}
	}
	s := NewSnapshotter(Options{Proc: procfs.New(procfs.Options{Root: root, Timeout: time.Second}),
		KmsgPath: "testdata/kmsg", HungTaskPath: filepath.Join(root, "none"), Host: host})
	r := &Report{}
	nc := s.nodeContext(context.Background(), r)
	if nc.LoadAvg != "0.50 0.25 2.00" || nc.Host == nil || nc.Host.Load15 != 2 {
		t.Errorf("node context %+v", nc)
	}
	if !strings.Contains(strings.Join(r.Errors, "\n"), "memory unreadable: no") {
		t.Errorf("errors %q lack the host's", r.Errors)
	}
	// Without Options.Host there are no host facts, and no error for them.
	s = NewSnapshotter(Options{Proc: procfs.New(procfs.Options{Root: root, Timeout: time.Second}),
		KmsgPath: "testdata/kmsg", HungTaskPath: filepath.Join(root, "none")})
	if nc := s.nodeContext(context.Background(), &Report{}); nc.Host != nil || nc.LoadAvg != "" {
		t.Errorf("without Host: %+v", nc)
	}
}
