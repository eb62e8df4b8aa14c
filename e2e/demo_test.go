package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/internal/testutil/hangfs"
)

// The demo (scripts/demo.sh, make demo) cleans up whatever signals stop it
// and however close together they come: two SIGINTs 50 ms apart (a
// double Ctrl-C, sent to its whole process group as a terminal does, or to
// the script alone as `timeout -s INT` does), SIGTERM, SIGHUP; in the hold
// after the diagnosis and while the hung epilogue is still being handled;
// and with a FUSE server that SIGKILL cannot end (a thread of its own
// waits on its own mount, as go-fuse's does while it mounts: the demo used
// to wait on it for ever). Each time it exits 0 and leaves no cgroup
// gracewatch-demo-<pid>-*, no FUSE mount, no process (hangfs-serve,
// agents, wrappers) and no temporary folder (admin.token, mesh.key).
func TestDemoCleansUpOnSignals(t *testing.T) {
	testutil.RequireRoot(t)
	_, err := exec.LookPath("python3")
	testutil.Require(t, err == nil, "the demo needs python3")
	cgMount := cgroup2Mount(t)
	testutil.Require(t, cgMount != "", "the demo needs a cgroup v2 mount")
	script, err := filepath.Abs(filepath.Join("..", "scripts", "demo.sh"))
	if err != nil {
		t.Fatal(err)
	}
	// bash cannot trap a signal that was ignored when it started (POSIX:
	// it stays ignored), and the demo inherits this process's ignored
	// signals: run under nohup, or in the background of a script (which
	// ignores SIGINT), the test would send signals the demo never sees.
	// A Go handler is reset to the default action in a child: catch them
	// here meanwhile.
	for _, sig := range []os.Signal{syscall.SIGINT, syscall.SIGHUP, syscall.SIGTERM} {
		if signal.Ignored(sig) {
			c := make(chan os.Signal, 1)
			signal.Notify(c, sig)
			defer signal.Stop(c)
		}
	}
	const hold, hang = "Press Ctrl-C to stop", "== jobs 1001"
	tests := []struct {
		name    string
		when    string // output after which the signals are sent
		group   bool   // to the demo's process group (a terminal's Ctrl-C), else to the script
		signals []syscall.Signal
		env     []string
	}{
		{"two SIGINTs to the group in the hold", hold, true, []syscall.Signal{syscall.SIGINT, syscall.SIGINT}, nil},
		{"two SIGINTs to the script during the hang", hang, false, []syscall.Signal{syscall.SIGINT, syscall.SIGINT}, nil},
		{"SIGTERM to the script in the hold", hold, false, []syscall.Signal{syscall.SIGTERM}, nil},
		{"SIGHUP to the group during the hang", hang, true, []syscall.Signal{syscall.SIGHUP}, nil},
		{"SIGINT to the group in the hold, the FUSE server stuck on its own mount", hold, true,
			[]syscall.Signal{syscall.SIGINT}, []string{hangfs.EnvSelfRead + "=1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "demo.out")
			f, err := os.Create(out)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			cmd := exec.Command("bash", script)
			// A file, not a pipe: a process the demo left behind must not
			// keep Wait from returning.
			cmd.Stdout, cmd.Stderr = f, f
			cmd.Env = append(os.Environ(), "DEMO_HOLD=1", "DEMO_GRACE=4s", "DEMO_BIN="+filepath.Dir(bins.aggregator))
			cmd.Env = append(cmd.Env, tt.env...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pid := cmd.Process.Pid
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() {
				// Whatever happened, nothing of this run may stay.
				syscall.Kill(-pid, syscall.SIGKILL)
			})
			output := func() string { b, _ := os.ReadFile(out); return string(b) }
			deadline := time.Now().Add(4 * time.Minute)
			for !strings.Contains(output(), tt.when) {
				select {
				case err := <-exited:
					t.Fatalf("the demo ended (%v) before %q:\n%s", err, tt.when, output())
				case <-time.After(100 * time.Millisecond):
				}
				if time.Now().After(deadline) {
					t.Fatalf("no %q after 4 minutes:\n%s", tt.when, output())
				}
			}
			m := regexp.MustCompile(`\(state in (\S*/gracewatch-demo\.[A-Za-z0-9]+)\)`).FindStringSubmatch(output())
			if m == nil {
				t.Fatalf("the demo did not say its folder:\n%s", output())
			}
			dir := m[1]
			target := pid
			if tt.group {
				target = -pid
			}
			for i, sig := range tt.signals {
				if i > 0 {
					// Not a wait: the spacing of a double Ctrl-C is the
					// case under test.
					time.Sleep(50 * time.Millisecond)
				}
				err := syscall.Kill(target, sig)
				if i > 0 && err == syscall.ESRCH {
					// A fast machine: the demo handled the first signal,
					// cleaned up and exited (and was reaped) within the
					// spacing; what follows checks that it did so well.
					t.Logf("the demo was gone before signal %d (%v)", i+1, sig)
					break
				}
				if err != nil {
					t.Fatalf("signal %d (%v) to %d: %v", i+1, sig, target, err)
				}
			}
			// The demo's own stop is bounded (its agents' stop, the FUSE
			// abort); three minutes is for a machine squeezed onto one
			// busy CPU.
			select {
			case err := <-exited:
				if err != nil {
					t.Errorf("the demo exited with %v, want 0", err)
				}
			case <-time.After(3 * time.Minute):
				t.Fatalf("the demo did not end within 3 minutes of %v:\n%s", tt.signals, output())
			}
			got := output()
			if !strings.Contains(got, "demo: stopped and cleaned up") {
				t.Errorf("no cleanup message:\n%s", got)
			}
			for _, left := range leftovers(t, pid, dir, cgMount) {
				t.Errorf("left behind: %s", left)
			}
			if t.Failed() {
				t.Logf("demo output:\n%s", got)
			}
		})
	}
}

// cgroup2Mount returns the cgroup v2 mount point from mountinfo, or "".
func cgroup2Mount(t *testing.T) string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if _, after, ok := strings.Cut(line, " - cgroup2 "); ok && after != "" {
			if f := strings.Fields(line); len(f) > 4 {
				return f[4]
			}
		}
	}
	return ""
}

// leftovers lists what a demo run (script pid, folder dir) left: its
// folder, a mount under it, its cgroups, a process in its process group or
// naming its folder.
func leftovers(t *testing.T, pid int, dir, cgMount string) []string {
	var left []string
	if _, err := os.Lstat(dir); err == nil {
		left = append(left, "folder "+dir)
	}
	if data, err := os.ReadFile("/proc/self/mountinfo"); err == nil && bytes.Contains(data, []byte(" "+dir)) {
		left = append(left, "a mount under "+dir)
	}
	cgs, _ := filepath.Glob(filepath.Join(cgMount, fmt.Sprintf("gracewatch-demo-%d-*", pid)))
	for _, cg := range cgs {
		left = append(left, "cgroup "+cg)
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		n, err := strconv.Atoi(p.Name())
		if err != nil || zombie(n) {
			continue // a zombie has ended: init reaps the demo's orphans
		}
		if pgid, err := syscall.Getpgid(n); err == nil && pgid == pid {
			left = append(left, fmt.Sprintf("process %d in the demo's process group: %s (%s)", n, cmdline(n), stat(n)))
			continue
		}
		if c := cmdline(n); strings.Contains(c, dir) {
			left = append(left, fmt.Sprintf("process %d: %s", n, c))
		}
	}
	return left
}

func stat(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return strings.TrimSpace(string(b))
}

// zombie reports whether pid has exited and waits to be reaped (or is gone).
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z'
}

func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.TrimSpace(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
}
