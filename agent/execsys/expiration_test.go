package execsys

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestExpirationCommand: the first non-empty line the command prints, with
// {job} replaced by the job's ID; every way it can fail is an error that
// says which: an exit status with its standard error, no output, a command
// that does not answer within its timeout (its whole process group is
// killed, children that hold the output open included).
func TestExpirationCommand(t *testing.T) {
	type want struct {
		line string // the answer; "" when it fails
		err  string // what its error holds
	}
	cases := map[string]struct {
		script  string
		timeout time.Duration
		want    want
	}{
		"answer": {script: `printf '\n  \n%s-1764750000\nlater\n' "$0"`, want: want{line: "41-1764750000"}},
		"fails":  {script: `echo 'Invalid job id specified' >&2; exit 1`, want: want{err: "exit status 1: Invalid job id specified"}},
		"silent": {script: `exit 0`, want: want{err: "printed nothing"}},
		"hangs":  {script: `sleep 60 & sleep 60`, timeout: 200 * time.Millisecond, want: want{err: "did not answer within 200ms"}},
		"floods": {script: `head -c 100000 /dev/zero | tr '\0' x; echo`, want: want{line: strings.Repeat("x", maxExpirationOutput)}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			timeout := tc.timeout
			if timeout == 0 {
				timeout = 30 * time.Second
			}
			e := NewExpirationCommand([]string{"/bin/sh", "-c", tc.script, "{job}"}, timeout)
			got, err := e.Expiration(context.Background(), "41")
			if tc.want.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want.err) {
					t.Fatalf("Expiration = %q, %v; want an error with %q", got, err, tc.want.err)
				}
				return
			}
			if err != nil || got != tc.want.line {
				t.Fatalf("Expiration = %.40q (%d bytes), %v; want %.40q", got, len(got), err, tc.want.line)
			}
		})
	}
}
