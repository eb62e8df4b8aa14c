package execsys

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// maxExpirationOutput bounds what is kept of the expiration command's
// output: a time fits in a line.
const maxExpirationOutput = 4 << 10

// ExpirationCommand runs [teardown] expiration_command to ask the exec
// system for a job's current expiration (teardown.Expirations). Each run
// is bounded by timeout: the command gets SIGKILL with its whole process
// group when it does not answer in time. It is safe for concurrent use.
type ExpirationCommand struct {
	argv    []string
	timeout time.Duration
}

// NewExpirationCommand returns the command argv ("{job}" in an argument
// stands for the job's ID), each run bounded by timeout.
func NewExpirationCommand(argv []string, timeout time.Duration) *ExpirationCommand {
	return &ExpirationCommand{argv: argv, timeout: timeout}
}

// Timeout is the bound of one run.
func (e *ExpirationCommand) Timeout() time.Duration { return e.timeout }

// Expiration runs the command for job and returns the first non-empty
// line it printed. The errors say what went wrong: a failed start, an exit
// status with the end of its standard error, a timeout, no output.
func (e *ExpirationCommand) Expiration(ctx context.Context, job string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	argv := make([]string, len(e.argv))
	for i, a := range e.argv {
		argv[i] = strings.ReplaceAll(a, "{job}", job)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	var out, errOut capped
	out.max, errOut.max = maxExpirationOutput, 512
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	switch {
	case ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return "", fmt.Errorf("expiration command %s did not answer within %v", argv[0], e.timeout)
	case err != nil:
		msg := strings.TrimSpace(errOut.String())
		if msg != "" {
			return "", fmt.Errorf("expiration command %s: %w: %s", argv[0], err, msg)
		}
		return "", fmt.Errorf("expiration command %s: %w", argv[0], err)
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if l := strings.TrimSpace(line); l != "" {
			return l, nil
		}
	}
	return "", fmt.Errorf("expiration command %s printed nothing", argv[0])
}

// capped keeps the first max bytes written to it and drops the rest. Its
// buffer is a field, not embedded: an embedded bytes.Buffer's ReadFrom
// would be promoted, and os/exec's copy of the output (io.Copy) would call
// it instead of Write, bound and all.
type capped struct {
	buf bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (c *capped) String() string { return c.buf.String() }
