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
	for _, tc := range []struct {
		name    string
		script  string
		timeout time.Duration
		want    string
		err     string
	}{
		{name: "answer", script: `printf '\n  \n%s-1764750000\nlater\n' "$0"`, want: "41-1764750000"},
		{name: "fails", script: `echo 'Invalid job id specified' >&2; exit 1`, err: "exit status 1: Invalid job id specified"},
		{name: "silent", script: `exit 0`, err: "printed nothing"},
		{name: "hangs", script: `sleep 60 & sleep 60`, timeout: 200 * time.Millisecond, err: "did not answer within 200ms"},
		{name: "floods", script: `head -c 100000 /dev/zero | tr '\0' x; echo`, want: strings.Repeat("x", maxExpirationOutput)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			timeout := tc.timeout
			if timeout == 0 {
				timeout = 30 * time.Second
			}
			e := NewExpirationCommand([]string{"/bin/sh", "-c", tc.script, "{job}"}, timeout)
			got, err := e.Expiration(context.Background(), "41")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Expiration = %q, %v; want an error with %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Expiration = %.40q (%d bytes), %v; want %.40q", got, len(got), err, tc.want)
			}
		})
	}
}
