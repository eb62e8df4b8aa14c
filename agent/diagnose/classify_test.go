package diagnose

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gracewatch/gracewatch/agent/procfs"
)

// fixtureThread builds a Thread from the files of testdata/proc/PID/task/TID,
// the way Snapshot does.
func fixtureThread(t *testing.T, pid, tid string) Thread {
	t.Helper()
	dir := filepath.Join("testdata/proc", pid, "task", tid)
	read := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	st, err := procfs.ParseStat(read("stat"))
	if err != nil {
		t.Fatal(err)
	}
	status, err := procfs.ParseStatus(read("status"))
	if err != nil {
		t.Fatal(err)
	}
	return Thread{
		State:       st.State,
		Flags:       st.Flags,
		Exiting:     st.Exiting(),
		Stack:       procfs.ParseStack(read("stack")),
		Wchan:       procfs.ParseWchan(read("wchan")),
		KillPending: (status.SigPnd|status.ShdPnd)&procfs.SigKillMask != 0,
	}
}

func TestClassify(t *testing.T) {
	exitStack := []string{"rpc_wait_bit_killable", "__fput", "task_work_run", "do_exit"}
	tests := []struct {
		name       string
		thread     Thread
		mainZombie bool
		want       Class
	}{
		{name: "real unkillable cat on hangfs", thread: fixtureThread(t, "9507", "9507"), want: Unkillable},
		{name: "real sleep", thread: fixtureThread(t, "9508", "9508"), want: Missed},
		{name: "real zombie", thread: fixtureThread(t, "9509", "9509"), want: Zombie},
		{name: "exit-hang fixture", thread: fixtureThread(t, "9600", "9600"), want: ExitHang},
		{name: "vfork parent", thread: fixtureThread(t, "9620", "9620"), want: KillableD},
		{name: "zombie main with live threads", thread: fixtureThread(t, "9630", "9630"), mainZombie: true, want: Missed},
		{name: "live thread of zombie main", thread: fixtureThread(t, "9630", "9631"), want: Missed},
		{name: "running with SIGKILL", thread: fixtureThread(t, "9640", "9640"), want: Dying},

		{name: "D with kill pending", thread: Thread{State: "D", KillPending: true}, want: Unkillable},
		{name: "D without kill", thread: Thread{State: "D"}, want: KillableD},
		{name: "exit-hang before unkillable", thread: Thread{State: "D", Flags: procfs.PFExiting, Stack: exitStack, KillPending: true}, want: ExitHang},
		{name: "exiting by bool", thread: Thread{State: "D", Exiting: true, Stack: []string{"exit_mmap", "mmput"}}, want: ExitHang},
		{name: "exit frame with suffix", thread: Thread{State: "D", Exiting: true, Stack: []string{"__fput.isra.0"}}, want: ExitHang},
		{name: "exiting without exit frames", thread: Thread{State: "D", Exiting: true, Stack: []string{"request_wait_answer"}, KillPending: true}, want: Unkillable},
		{name: "exiting, stack unreadable", thread: Thread{State: "D", Exiting: true}, want: KillableD},
		{name: "exit frames without PF_EXITING", thread: Thread{State: "D", Stack: exitStack}, want: KillableD},
		{name: "S without kill", thread: Thread{State: "S"}, want: Missed},
		{name: "R without kill", thread: Thread{State: "R"}, want: Missed},
		{name: "stopped", thread: Thread{State: "T"}, want: Missed},
		{name: "S with kill", thread: Thread{State: "S", KillPending: true}, want: Dying},
		{name: "R with kill", thread: Thread{State: "R", KillPending: true}, want: Dying},
		{name: "zombie", thread: Thread{State: "Z"}, want: Zombie},
		{name: "dead", thread: Thread{State: "X"}, want: Zombie},
		{name: "zombie with kill", thread: Thread{State: "Z", KillPending: true}, want: Zombie},
		{name: "zombie main of a live process", thread: Thread{State: "Z"}, mainZombie: true, want: Missed},
		{name: "state unreadable", thread: Thread{}, want: Missed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Classify(tt.thread, tt.mainZombie); got != tt.want {
				t.Errorf("Classify(%+v, %v) = %s, want %s", tt.thread, tt.mainZombie, got, tt.want)
			}
		})
	}
}

// TestRealUnkillableFixture pins what the fixture of a real unkillable
// thread (captured from a SIGKILLed reader of hangfs) holds.
func TestRealUnkillableFixture(t *testing.T) {
	th := fixtureThread(t, "9507", "9507")
	if th.State != "D" || !th.KillPending || th.Wchan != "request_wait_answer" ||
		len(th.Stack) == 0 || th.Stack[0] != "request_wait_answer" {
		t.Errorf("fixture thread = %+v", th)
	}
}

func TestSeverityOrder(t *testing.T) {
	want := []Class{Unkillable, ExitHang, KillableD, Missed, Dying, Zombie}
	for i := 1; i < len(want); i++ {
		if want[i-1].Severity() <= want[i].Severity() {
			t.Errorf("%s is not worse than %s", want[i-1], want[i])
		}
	}
	if Class("nonsense").Severity() != 0 || Zombie.Severity() <= 0 {
		t.Error("unknown classes must rank below every known one")
	}
}

func TestWorstThread(t *testing.T) {
	tests := []struct {
		name    string
		threads []Thread
		want    int
	}{
		{"none", nil, -1},
		{"worst class wins", []Thread{{TID: 1, Class: Missed}, {TID: 2, Class: Unkillable}, {TID: 3, Class: KillableD}}, 1},
		{"first among equals", []Thread{{TID: 1, Class: KillableD}, {TID: 2, Class: KillableD}}, 0},
		{"live thread before zombie main", []Thread{{TID: 1, State: "Z", Class: Missed}, {TID: 2, State: "S", Class: Missed}}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := worstThread(tt.threads); got != tt.want {
				t.Errorf("worstThread = %d, want %d", got, tt.want)
			}
		})
	}
}
