// Package runcmd runs a site's command (an actuator, a scheduler's
// reservation command) the way the aggregator must: without a shell, in a
// process group of its own that is killed whole when its time is up, with
// its output bounded.
package runcmd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// OutputTail is how much of a command's (combined) output is kept for
	// the log.
	OutputTail = 2048
	// waitDelay bounds the wait for a killed command's pipes (a grandchild
	// that kept them open).
	waitDelay = 5 * time.Second
)

// ErrTimedOut is the error of a command that outlived its timeout.
var ErrTimedOut = errors.New("timed out")

// ErrTooMuchOutput is the error of a command whose standard output exceeded
// Options.StdoutLimit.
var ErrTooMuchOutput = errors.New("too much output")

// Options say how Run runs a command.
type Options struct {
	// Timeout bounds the run; the whole process group is killed at it. It
	// must be positive.
	Timeout time.Duration
	// Env is added to the aggregator's environment.
	Env []string
	// StdoutLimit, when positive, keeps the standard output apart (in
	// Result.Stdout) up to this many bytes; past it the group is killed and
	// Run fails with ErrTooMuchOutput. Zero: the standard output goes with
	// the standard error into Result.Output.
	StdoutLimit int
}

// Result is what a run left.
type Result struct {
	// Exit is the exit code, -1 if the command did not exit (killed, not
	// started).
	Exit int
	// Stdout is the standard output when Options.StdoutLimit is set.
	Stdout []byte
	// Output is the last OutputTail bytes of the standard error (and of the
	// standard output without StdoutLimit), trimmed.
	Output string
}

// Run runs argv in a process group of its own, without a shell, and waits
// for it. The group is killed with SIGKILL when o.Timeout passes or ctx
// ends. It returns an error unless the command exited 0: ErrTimedOut (with
// the timeout) when it outlived o.Timeout, ErrTooMuchOutput, or what
// exec says. It blocks for at most o.Timeout plus a few seconds.
func Run(ctx context.Context, argv []string, o Options) (Result, error) {
	res := Result{Exit: -1}
	if len(argv) == 0 || argv[0] == "" {
		return res, errors.New("no command")
	}
	if o.Timeout <= 0 {
		return res, errors.New("no timeout")
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		// The whole group: a shell script's children too.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = waitDelay
	cmd.Env = append(os.Environ(), o.Env...)
	var tail tailBuffer
	cmd.Stderr = &tail
	var out *limitBuffer
	if o.StdoutLimit > 0 {
		out = &limitBuffer{limit: o.StdoutLimit, over: cancel}
		cmd.Stdout = out
	} else {
		cmd.Stdout = &tail
	}
	err := cmd.Run()
	if cmd.ProcessState != nil {
		res.Exit = cmd.ProcessState.ExitCode()
	}
	res.Output = tail.String()
	if out != nil {
		res.Stdout = out.bytes()
		if out.exceeded() {
			return res, fmt.Errorf("%w: more than %d bytes on standard output (process group killed)", ErrTooMuchOutput, o.StdoutLimit)
		}
	}
	if ctx.Err() != nil && err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("%w after %v (process group killed)", ErrTimedOut, o.Timeout)
		} else {
			err = fmt.Errorf("stopped: %w", ctx.Err())
		}
	}
	return res, err
}

// tailBuffer keeps the last OutputTail bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(p)
	if t.buf.Len() > 2*OutputTail {
		b := t.buf.Bytes()[t.buf.Len()-OutputTail:]
		t.buf = *bytes.NewBuffer(bytes.Clone(b))
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf.Bytes()
	if len(b) > OutputTail {
		b = b[len(b)-OutputTail:]
	}
	return strings.TrimSpace(string(b))
}

// limitBuffer keeps what is written to it up to limit bytes; the first
// write past it calls over (which kills the command) and fails.
type limitBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	limit int
	over  func()
	past  bool
}

func (l *limitBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.past {
		return 0, io.ErrShortWrite
	}
	if l.buf.Len()+len(p) > l.limit {
		l.past = true
		l.over()
		return 0, io.ErrShortWrite
	}
	return l.buf.Write(p)
}

func (l *limitBuffer) bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.buf.Bytes())
}

func (l *limitBuffer) exceeded() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.past
}
