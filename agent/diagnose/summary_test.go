package diagnose

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func fuseCat(pid int) Process {
	return Process{
		PID: pid, Comm: "cat", Class: Unkillable, State: "D", Wchan: "request_wait_answer",
		Threads: []Thread{{TID: pid, State: "D", Class: Unkillable, Stack: []string{"request_wait_answer", "fuse_direct_io"}}},
		Files: []File{
			{FD: "1", Target: "/home/u/out", FSType: "nfs4", Mountpoint: "/home", Source: "fs1:/home", Device: "0:50"},
			{FD: "3", Target: "/scratch/x", FSType: "fuse.sshfs", Mountpoint: "/scratch", Source: "u@h:/", Device: "0:52"},
			{FD: "cwd", Target: "/home/u", FSType: "nfs4", Mountpoint: "/home", Source: "fs1:/home", Device: "0:50"},
		},
	}
}

func TestSummarize(t *testing.T) {
	termAt := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		r    Report
		want string
	}{
		{
			name: "the design's example",
			r:    Report{Job: "1234", Grace: "2m0s", Stage: StageAfterEscalation, Processes: []Process{fuseCat(5814)}},
			// fuse, not nfs: the stack points at fuse.
			want: "job 1234 teardown exceeded grace 2m0s: 1 unkillable (pid 5814 cat, D in request_wait_answer, fuse.sshfs /scratch)",
		},
		{
			name: "all killed",
			r:    Report{Job: "7", Grace: "5s", Outcome: OutcomeKilled},
			want: "job 7 teardown exceeded grace 5s: all processes killed",
		},
		{
			name: "all terminated",
			r:    Report{Job: "7", Grace: "5s", Outcome: OutcomeTerminated},
			want: "job 7 teardown exceeded grace 5s: all processes ended after SIGTERM",
		},
		{
			name: "on demand",
			r:    Report{Job: "8", Grace: "1m0s", Stage: StageOnDemand},
			want: "job 8 teardown (grace 1m0s): no processes left",
		},
		{
			name: "three detailed, worst first, counts for the rest",
			r: Report{Job: "9", Grace: "10s", Timeline: Timeline{Term: &termAt}, Processes: []Process{
				{PID: 30, Comm: "sleep", Class: Missed, State: "S", Wchan: "hrtimer_nanosleep"},
				{PID: 31, Comm: "z", Class: Zombie, State: "Z"},
				{PID: 20, Comm: "bash", Class: KillableD, State: "D", Wchan: "wait_for_vfork_done"},
				fuseCat(10),
				{PID: 32, Comm: "sleep", Class: Missed, State: "S"},
			}},
			want: "job 9 teardown exceeded grace 10s: 1 unkillable (pid 10 cat, D in request_wait_answer, fuse.sshfs /scratch), " +
				"1 killable-d (pid 20 bash, D in wait_for_vfork_done), 2 missed (pid 30 sleep, S in hrtimer_nanosleep), 1 zombie",
		},
		{
			name: "kept on one line",
			r:    Report{Job: "a\nb", Grace: "1s", Timeline: Timeline{Term: &termAt}, Processes: []Process{{PID: 4, Comm: "x\ty", Class: Missed, State: "S"}}},
			want: "job a b teardown exceeded grace 1s: 1 missed (pid 4 x y, S)",
		},
		{
			name: "before any signal a sleeping process is still running, not missed",
			r: Report{Job: "6", Grace: "3s", Stage: StageBeforeSignal, Processes: []Process{
				{PID: 40, Comm: "sh", Class: Missed, State: "S", Wchan: "do_wait"},
				{PID: 41, Comm: "cat", Class: Missed, State: "S", Wchan: "request_wait_answer"},
			}},
			want: "job 6 teardown exceeded grace 3s: 2 still running (pid 40 sh, S in do_wait; pid 41 cat, S in request_wait_answer)",
		},
		{
			name: "no network file system",
			r: Report{Job: "5", Grace: "1s", Processes: []Process{{PID: 4, Comm: "x", Class: Dying, State: "R",
				Files: []File{{FD: "cwd", Target: "/tmp", FSType: "ext4", Mountpoint: "/"}}}}},
			want: "job 5 teardown exceeded grace 1s: 1 dying (pid 4 x, R)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Summarize(&tt.r); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestSummarizeIsBounded(t *testing.T) {
	r := &Report{Job: strings.Repeat("é", 300), Grace: "1s"}
	for i := range 50 {
		r.Processes = append(r.Processes, Process{PID: 1000 + i, Comm: strings.Repeat("ü", 8), Class: Unkillable, State: "D", Wchan: "request_wait_answer"})
	}
	got := Summarize(r)
	if len(got) > MaxSummaryBytes || !strings.HasSuffix(got, "…") || !utf8.ValidString(got) {
		t.Errorf("%d bytes, valid %v: %q", len(got), utf8.ValidString(got), got)
	}
}

func TestSuggest(t *testing.T) {
	nfsProc := Process{PID: 2, Comm: "dd", Class: Unkillable, State: "D",
		Threads: []Thread{{Class: Unkillable, Stack: []string{"rpc_wait_bit_killable"}}},
		Files:   []File{{FD: "3", Target: "/home/a", FSType: "nfs4", Mountpoint: "/home", Source: "fs1:/export/home", Device: "0:50"}}}
	lustreProc := Process{PID: 3, Comm: "cp", Class: ExitHang, State: "D",
		Files: []File{{FD: "cwd", Target: "/lus/a", FSType: "lustre", Mountpoint: "/lus", Source: "10.0.0.1@o2ib:/lus"}}}
	noDevice := fuseCat(1)
	noDevice.Files = []File{{FD: "3", Target: "/scr atch/x", FSType: "fuse.sshfs", Mountpoint: "/scr atch"}}
	tests := []struct {
		name      string
		fusectl   string // NodeContext.FuseCtl
		processes []Process
		want      []string
	}{
		{
			name:      "fuse, fusectl mounted",
			fusectl:   "/sys/fs/fuse/connections",
			processes: []Process{fuseCat(1)},
			want: []string{
				"abort the FUSE connection: echo 1 > /sys/fs/fuse/connections/52/abort (fuse.sshfs on /scratch)",
				"if that does not release them, drain and reboot the node",
			},
		},
		{
			name:      "fuse, fusectl mounted elsewhere",
			fusectl:   "/run/fusectl",
			processes: []Process{fuseCat(1)},
			want: []string{
				"abort the FUSE connection: echo 1 > /run/fusectl/52/abort (fuse.sshfs on /scratch)",
				"if that does not release them, drain and reboot the node",
			},
		},
		{
			name:      "fuse, fusectl not mounted",
			fusectl:   FuseCtlNotMounted,
			processes: []Process{fuseCat(1)},
			want: []string{
				"abort the FUSE connection: mount -t fusectl none /sys/fs/fuse/connections && echo 1 > /sys/fs/fuse/connections/52/abort (fuse.sshfs on /scratch)",
				"if that does not release them, drain and reboot the node",
			},
		},
		{
			name:      "fuse, fusectl unknown",
			processes: []Process{fuseCat(1)},
			want: []string{
				"abort the FUSE connection: echo 1 > /sys/fs/fuse/connections/52/abort (fuse.sshfs on /scratch); if /sys/fs/fuse/connections is empty, first: mount -t fusectl none /sys/fs/fuse/connections",
				"if that does not release them, drain and reboot the node",
			},
		},
		{
			name:      "fuse without a device",
			fusectl:   "/sys/fs/fuse/connections",
			processes: []Process{noDevice},
			want: []string{
				`abort the FUSE connection: echo 1 > /sys/fs/fuse/connections/$(awk -v m='/scr atch' '$5 == m {split($3, d, ":"); print d[2]}' /proc/self/mountinfo)/abort (fuse.sshfs on /scr atch)`,
				"if that does not release them, drain and reboot the node",
			},
		},
		{
			name:      "nfs and lustre",
			processes: []Process{lustreProc, nfsProc},
			want: []string{
				"check the NFS server fs1:/export/home (nfs4 on /home)",
				"check the Lustre servers of 10.0.0.1@o2ib:/lus (lustre on /lus)",
				"if that does not release them, drain and reboot the node",
			},
		},
		{
			name:      "unkillable on a local disk",
			processes: []Process{{PID: 4, Comm: "x", Class: Unkillable, State: "D", Files: []File{{FD: "cwd", Target: "/", FSType: "ext4"}}}},
			want:      []string{"drain and reboot the node: a process stuck in D with SIGKILL pending only leaves with a reboot"},
		},
		{
			name: "missed, dying, zombie, killable-d",
			processes: []Process{
				{PID: 5, Comm: "sleep", Class: Missed}, {PID: 6, Comm: "py", Class: Dying},
				{PID: 7, Comm: "true", Class: Zombie, PPID: 1}, {PID: 8, Comm: "bash", Class: KillableD},
			},
			want: []string{
				"pid 8 (bash) is in D without SIGKILL pending: send SIGKILL; it should exit within seconds",
				"kill(2) pid 5 (sleep) with SIGKILL: it is alive and has no SIGKILL pending (cgroup.kill may have missed it)",
				"pid 6 (py) has SIGKILL pending and should exit: wait",
				"pid 7 (true) is a zombie: its parent pid 1 must reap it (it does not keep the cgroup populated)",
			},
		},
		{name: "nothing", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Suggest(&Report{Processes: tt.processes, NodeContext: NodeContext{FuseCtl: tt.fusectl}})
			if !slices.Equal(got, tt.want) {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestLogAttrs(t *testing.T) {
	r := &Report{Job: "1234", Node: "n1", Stage: StageAfterEscalation, Outcome: OutcomeHung,
		Cgroups:   []CgroupInfo{{Path: "/sys/fs/cgroup/gracewatch/job-1234"}},
		Processes: []Process{{PID: 9, Class: Missed}, fuseCat(5814)}}
	got := map[string]string{}
	for _, a := range LogAttrs(r) {
		got[a.Key] = a.Value.String()
	}
	want := map[string]string{"job": "1234", "node": "n1", "stage": "after-escalation", "outcome": "hung",
		"cgroup": "/sys/fs/cgroup/gracewatch/job-1234", "processes": "2", "hung_pid": "5814", "class": "unkillable"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
	for _, a := range LogAttrs(&Report{Job: "1"}) {
		if a.Key == "hung_pid" || a.Key == "class" {
			t.Errorf("an empty report logs %s", a)
		}
	}
}
