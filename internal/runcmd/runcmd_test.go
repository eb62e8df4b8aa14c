package runcmd

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name       string
		script     string
		o          Options
		exit       int
		stdout     string
		output     string
		wantErr    error // errors.Is; nil with fail: any error
		fail       bool
		maxRunTime time.Duration
	}{
		{name: "success", script: "echo out; echo err >&2", o: Options{Timeout: 5 * time.Second}, exit: 0, output: "out\nerr"},
		{name: "stdout apart", script: "echo out; echo err >&2", o: Options{Timeout: 5 * time.Second, StdoutLimit: 100},
			exit: 0, stdout: "out\n", output: "err"},
		{name: "env", script: `echo "$GW_X"`, o: Options{Timeout: 5 * time.Second, Env: []string{"GW_X=y z"}}, output: "y z"},
		{name: "exit code", script: "echo oops >&2; exit 4", o: Options{Timeout: 5 * time.Second}, exit: 4, output: "oops", fail: true},
		{name: "stdout over its limit", script: "head -c 100000 /dev/zero; sleep 30", o: Options{Timeout: 20 * time.Second, StdoutLimit: 1000},
			exit: -1, wantErr: ErrTooMuchOutput, maxRunTime: 10 * time.Second},
		{name: "timeout", script: "sleep 30", o: Options{Timeout: 200 * time.Millisecond}, exit: -1, wantErr: ErrTimedOut, maxRunTime: 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			res, err := Run(t.Context(), []string{"/bin/sh", "-c", tc.script}, tc.o)
			if tc.maxRunTime > 0 && time.Since(start) > tc.maxRunTime {
				t.Errorf("took %v, want at most %v", time.Since(start), tc.maxRunTime)
			}
			switch {
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			case tc.wantErr == nil && tc.fail && err == nil:
				t.Fatal("no error")
			case tc.wantErr == nil && !tc.fail && err != nil:
				t.Fatalf("err = %v", err)
			}
			if res.Exit != tc.exit {
				t.Errorf("exit = %d, want %d", res.Exit, tc.exit)
			}
			if tc.wantErr == nil && string(res.Stdout) != tc.stdout {
				t.Errorf("stdout = %q, want %q", res.Stdout, tc.stdout)
			}
			if tc.wantErr == nil && res.Output != tc.output {
				t.Errorf("output = %q, want %q", res.Output, tc.output)
			}
		})
	}
}

// TestTimeoutKillsTheGroup: a grandchild that outlives its shell is killed
// with it at the timeout.
func TestTimeoutKillsTheGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	script := "sleep 60 & echo $! > " + pidFile + "; wait"
	_, err := Run(t.Context(), []string{"/bin/sh", "-c", script}, Options{Timeout: 500 * time.Millisecond})
	if !errors.Is(err, ErrTimedOut) {
		t.Fatalf("err = %v, want a timeout", err)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	var stat []byte
	if !testutil.Poll(30*time.Second, func() bool {
		if syscall.Kill(pid, 0) != nil {
			return true
		}
		// The killed sleep is a zombie of init until reaped: look at its state.
		var err error
		stat, err = os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		return err != nil || strings.Contains(string(stat), ") Z ")
	}) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the grandchild %d outlived the timeout: %s", pid, stat)
	}
}

func TestTailKeepsTheEnd(t *testing.T) {
	res, err := Run(t.Context(), []string{"/bin/sh", "-c", "head -c 10000 /dev/zero | tr '\\0' a; echo END"}, Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Output) > OutputTail || !strings.HasSuffix(res.Output, "END") {
		t.Errorf("output of %d bytes ending %q, want at most %d ending END", len(res.Output), res.Output[max(0, len(res.Output)-10):], OutputTail)
	}
}

func TestRunRefuses(t *testing.T) {
	if _, err := Run(t.Context(), nil, Options{Timeout: time.Second}); err == nil {
		t.Error("no error for an empty argv")
	}
	if _, err := Run(t.Context(), []string{"/bin/true"}, Options{}); err == nil {
		t.Error("no error without a timeout")
	}
	if _, err := Run(t.Context(), []string{"/nonexistent/program"}, Options{Timeout: time.Second}); err == nil {
		t.Error("no error for a missing program")
	}
}
