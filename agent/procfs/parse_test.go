package procfs

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestParseStat(t *testing.T) {
	tests := []struct {
		name    string
		data    []byte
		want    Stat
		exiting bool
		wantErr bool
	}{
		{name: "real unkillable cat", data: fixture(t, "stat-cat-unkillable"),
			want: Stat{PID: 9507, Comm: "cat", State: "D", PPID: 9494, Flags: 4194304, NumThreads: 1, StartTime: 80088}},
		{name: "real zombie", data: fixture(t, "stat-zombie"),
			want: Stat{PID: 9509, Comm: "true", State: "Z", PPID: 9494, Flags: 4227084, NumThreads: 1, StartTime: 80089}, exiting: true},
		{name: "comm with spaces and parens", data: fixture(t, "stat-comm-parens"),
			want: Stat{PID: 9508, Comm: "my (weird)) job", State: "S", PPID: 9494, Flags: 4194304, NumThreads: 1, StartTime: 80088}},
		{name: "exiting", data: fixture(t, "stat-exiting"),
			want: Stat{PID: 9510, Comm: "sleep", State: "D", PPID: 9494, Flags: 4194308, NumThreads: 1, StartTime: 80088}, exiting: true},
		{name: "times", data: []byte("7 (x) R 1 7 7 0 -1 0 0 0 0 0 12 34 0 0 20 0 3 0 500 0 0"),
			want: Stat{PID: 7, Comm: "x", State: "R", PPID: 1, Utime: 12, Stime: 34, NumThreads: 3, StartTime: 500}},
		{name: "no comm", data: []byte("7 x R 1"), wantErr: true},
		{name: "truncated", data: []byte("7 (x) R 1 7 7"), wantErr: true},
		{name: "bad number", data: []byte("7 (x) R one 7 7 0 -1 0 0 0 0 0 12 34 0 0 20 0 3 0 500 0 0"), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStat(tt.data)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if got != tt.want {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
			if got.Exiting() != tt.exiting {
				t.Errorf("Exiting() = %v, want %v", got.Exiting(), tt.exiting)
			}
		})
	}
}

func TestParseStatus(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		want    Status
		wantErr bool
	}{
		{name: "real unkillable cat", file: "status-unkillable", want: Status{
			Name: "cat", State: "D", Tgid: 9507, PID: 9507, PPID: 9494, Threads: 1,
			SigPnd: 0x100, ShdPnd: 0x100, VoluntaryCtxtSwitches: 6,
		}},
		{name: "real sleep", file: "status-sleep", want: Status{
			Name: "sleep", State: "S", Tgid: 9508, PID: 9508, PPID: 9494, Threads: 1,
			VoluntaryCtxtSwitches: 2,
		}},
		{name: "groups, uids and masks", file: "status-groups", want: Status{
			Name: "sleep", State: "S", Tgid: 9508, PID: 9508, PPID: 9494, Threads: 1,
			UID: [4]int{1000, 1001, 1002, 1003}, Groups: []int{4, 24, 27, 1000},
			ShdPnd: 0x8000000300004000, SigBlk: 0x14002, VoluntaryCtxtSwitches: 2,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStatus(fixture(t, tt.file))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
	for _, bad := range []string{"Name:\tx\n", "State:\tS (sleeping)\nSigPnd:\tzz\n", "State:\tS\nUid:\t1 2\n"} {
		if _, err := ParseStatus([]byte(bad)); err == nil {
			t.Errorf("ParseStatus(%q) succeeded, want an error", bad)
		}
	}
}

func TestSignalNames(t *testing.T) {
	tests := []struct {
		mask string
		want []string
	}{
		{"0000000000000000", nil},
		{"0000000000000100", []string{"SIGKILL"}},
		{"0000000000004100", []string{"SIGKILL", "SIGTERM"}},
		{"0000000000014002", []string{"SIGINT", "SIGTERM", "SIGCHLD"}},
		{"80000003c0000000", []string{"SIGSYS", "SIGRTMIN", "SIGRTMIN+1", "SIGRTMIN+2", "SIGRTMIN+32"}},
	}
	for _, tt := range tests {
		t.Run(tt.mask, func(t *testing.T) {
			m, err := ParseSigMask(tt.mask)
			if err != nil {
				t.Fatal(err)
			}
			if got := SignalNames(m); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("SignalNames(%s) = %v, want %v", tt.mask, got, tt.want)
			}
		})
	}
	if SigKillMask != 0x100 {
		t.Errorf("SigKillMask = %#x, want 0x100", SigKillMask)
	}
	if _, err := ParseSigMask("xyz"); err == nil {
		t.Error("ParseSigMask(xyz) succeeded")
	}
}

func TestParseMountinfo(t *testing.T) {
	ms, err := ParseMountinfo(fixture(t, "mountinfo"))
	if err != nil {
		t.Fatal(err)
	}
	byPoint := map[string]Mount{}
	for _, m := range ms {
		byPoint[m.Mountpoint] = m
	}
	tests := []struct {
		mountpoint string
		id         int
		device     string
		fstype     string
		source     string
	}{
		{"/", 27, "254:0", "ext4", "/dev/vda"},
		{"/sys/fs/cgroup/unified", 41, "0:38", "cgroup2", "cgroup2"},
		{"/tmp/gw-hangfs-356339456", 45, "0:40", "fuse.hangfs", "gracewatch-hangfs"},
		{"/home", 50, "0:52", "nfs4", "fileserver:/export/home"},
		{"/mnt/with space", 52, "0:54", "fuse.sshfs", `user@host:/a\b`},
	}
	for _, tt := range tests {
		t.Run(tt.mountpoint, func(t *testing.T) {
			m, ok := byPoint[tt.mountpoint]
			if !ok {
				t.Fatalf("no mount at %q", tt.mountpoint)
			}
			if m.ID != tt.id || m.Device() != tt.device || m.FSType != tt.fstype || m.Source != tt.source {
				t.Errorf("got id %d dev %s %s %s, want id %d dev %s %s %s",
					m.ID, m.Device(), m.FSType, m.Source, tt.id, tt.device, tt.fstype, tt.source)
			}
		})
	}
	if _, err := ParseMountinfo([]byte("1 2 0:3 / /x rw shared:1 ext4 /dev/x rw\n")); err == nil {
		t.Error("a line without the - separator parsed")
	}
}

func TestMountOf(t *testing.T) {
	ms, err := ParseMountinfo(fixture(t, "mountinfo"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ path, want string }{
		{"/tmp/gw-hangfs-356339456/hang", "/tmp/gw-hangfs-356339456"},
		{"/tmp/gw-hangfs-356339456", "/tmp/gw-hangfs-356339456"},
		{"/tmp/gw-hangfs-3563394567/x", "/"}, // a prefix, not a parent
		{"/home/alice/proj/run/out.dat", "/home/alice/proj"},
		{"/home/alice/notes", "/home"},
		{"/mnt/with space/f", "/mnt/with space"},
		{"/dev/pts/0", "/dev/pts"}, // two mounts stacked: the last one
		{"/usr/bin/cat", "/"},
	}
	for _, tt := range tests {
		m, ok := MountOf(ms, tt.path)
		if !ok || m.Mountpoint != tt.want {
			t.Errorf("MountOf(%q) = %q, %v; want %q", tt.path, m.Mountpoint, ok, tt.want)
		}
	}
	if m, _ := MountOf(ms, "/dev/pts/0"); m.ID != 29 {
		t.Errorf("stacked /dev/pts: got mount %d, want the topmost, 29", m.ID)
	}
	if _, ok := MountOf(ms, "pipe:[14237]"); ok {
		t.Error("a pipe matched a mount")
	}
}

func TestBootAndStartTime(t *testing.T) {
	boot, err := ParseBootTime(fixture(t, "proc-stat"))
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Unix(1796216636, 0); !boot.Equal(want) {
		t.Fatalf("boot = %v, want %v", boot, want)
	}
	st, err := ParseStat(fixture(t, "stat-cat-unkillable"))
	if err != nil {
		t.Fatal(err)
	}
	// 80088 ticks of 1/100 s after boot.
	if got, want := StartTime(boot, st.StartTime), time.Unix(1796216636+800, 880_000_000); !got.Equal(want) {
		t.Errorf("start = %v, want %v", got, want)
	}
	if _, err := ParseBootTime([]byte("cpu 1 2 3\n")); err == nil {
		t.Error("no btime parsed")
	}
}

func TestParseStack(t *testing.T) {
	tests := []struct {
		file string
		want []string
	}{
		{"stack-fuse", []string{"request_wait_answer", "__fuse_simple_request", "fuse_direct_io",
			"fuse_file_read_iter", "vfs_read", "ksys_read", "do_syscall_64", "entry_SYSCALL_64_after_hwframe"}},
		{"stack-module", []string{"rpc_wait_bit_killable", "__rpc_execute", "rpc_execute", "nfs4_do_call_sync",
			"__fput.isra.0", "do_exit"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			if got := ParseStack(fixture(t, tt.file)); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %q\nwant %q", got, tt.want)
			}
		})
	}
	if got := ParseStack(nil); got != nil {
		t.Errorf("empty stack = %q", got)
	}
}

func TestSmallParsers(t *testing.T) {
	if got := ParseWchan([]byte("0")); got != "" {
		t.Errorf("wchan 0 = %q", got)
	}
	if got := ParseWchan([]byte("request_wait_answer")); got != "request_wait_answer" {
		t.Errorf("wchan = %q", got)
	}
	if got := SplitCmdline([]byte("cat\x00/scratch/a b\x00")); !reflect.DeepEqual(got, []string{"cat", "/scratch/a b"}) {
		t.Errorf("cmdline = %q", got)
	}
	if got := SplitCmdline(nil); got != nil {
		t.Errorf("empty cmdline = %q", got)
	}
	if got := CgroupV2Path([]byte("4:memory:/x\n0::/gracewatch/job-1/epilog\n")); got != "/gracewatch/job-1/epilog" {
		t.Errorf("cgroup = %q", got)
	}
	if got := Unescape(`a\040b\011c\134d\12`); got != "a b\tc\\d\\12" {
		t.Errorf("Unescape = %q", got)
	}
}
