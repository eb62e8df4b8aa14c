package diagnose

import (
	"reflect"
	"strings"
	"testing"
)

func TestCauseOf(t *testing.T) {
	fuse := File{FD: "3", Target: "/mnt/x/hang", FSType: "fuse.hangfs", Source: "gracewatch-hangfs", Mountpoint: "/mnt/x"}
	nfs := File{FD: "4", Target: "/home/u/f", FSType: "nfs4", Source: "srv:/home", Mountpoint: "/home"}
	for _, tc := range []struct {
		name  string
		procs []Process
		want  Cause
	}{
		{"none", nil, Cause{}},
		{"the worst class's file system", []Process{
			{PID: 9, Comm: "sleep", Class: Missed, Wchan: "hrtimer_nanosleep", Files: []File{nfs}},
			{PID: 12, Comm: "cat", Class: Unkillable, Wchan: "request_wait_answer", Files: []File{fuse}},
		}, Cause{FSType: "fuse.hangfs", Source: "gracewatch-hangfs", Mountpoint: "/mnt/x", Wchan: "request_wait_answer",
			Class: Unkillable, ExamplePID: 12, ExampleComm: "cat", Job: "7"}},
		{"no file system: the wait channel", []Process{
			{PID: 5, Comm: "a.out", Class: KillableD, Wchan: "io_schedule"},
		}, Cause{Wchan: "io_schedule", Class: KillableD, ExamplePID: 5, ExampleComm: "a.out", Job: "7"}},
		{"an over-long mountpoint is not named", []Process{
			{PID: 5, Comm: "a", Class: Unkillable, Wchan: "w", Files: []File{{FSType: "nfs", Source: "s:/", Mountpoint: "/" + strings.Repeat("m", 300)}}},
		}, Cause{Wchan: "w", Class: Unkillable, ExamplePID: 5, ExampleComm: "a", Job: "7"}},
		{"an unprintable wchan is cleaned", []Process{
			{PID: 5, Comm: "a\x01b", Class: Unkillable, Wchan: "w\nx"},
		}, Cause{Wchan: "w?x", Class: Unkillable, ExamplePID: 5, ExampleComm: "a?b", Job: "7"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CauseOf(&Report{Job: "7", Processes: tc.procs})
			got.Counts = nil
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("CauseOf = %+v\nwant       %+v", got, tc.want)
			}
			if err := got.Check(); err != nil {
				t.Errorf("CauseOf gave a cause out of bounds: %v", err)
			}
		})
	}
	c := CauseOf(&Report{Job: "7", Processes: []Process{{PID: 1, Class: Unkillable}, {PID: 2, Class: Unkillable}, {PID: 3, Class: Zombie}}})
	if c.Counts[Unkillable] != 2 || c.Counts[Zombie] != 1 {
		t.Errorf("counts %v", c.Counts)
	}
}

func TestCauseCheck(t *testing.T) {
	for _, tc := range []struct {
		c    Cause
		want string
	}{
		{Cause{FSType: "lustre", Source: "mds@o2ib:/s", Mountpoint: "/s", Class: Unkillable}, ""},
		{Cause{FSType: strings.Repeat("f", 33)}, "cause fstype: 33 bytes, more than 32"},
		{Cause{Wchan: "a\tb"}, "cause wchan: holds the unprintable character U+0009"},
		{Cause{Wchan: "\xff"}, "cause wchan: not valid UTF-8"},
		{Cause{Wchan: "w", Class: "worst"}, `cause class: unknown class "worst"`},
		{Cause{Mountpoint: "/x"}, "cause: a source or mountpoint without an fstype"},
	} {
		err := tc.c.Check()
		if (err == nil) != (tc.want == "") || (err != nil && err.Error() != tc.want) {
			t.Errorf("Check(%+v) = %v, want %q", tc.c, err, tc.want)
		}
	}
}
