package e2e

// gracewatch wired into a Slurm site as packaging/examples ships it: the
// epilogue wrapper in front of the test's hung real epilogue, whose starts it
// stamps, and the scontrol actuators. readExample, replaceOnce and waitStamp
// serve the Flux tests' wiring too.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// epilogStart returns when the real epilogue of job started (it appends
// "JOB UNIXTIME" to the starts file), waiting at most timeout.
func (s *slurmSite) epilogStart(job string, timeout time.Duration) time.Time {
	s.t.Helper()
	at, err := waitStamp(s.path("epilog-starts"), timeout, job)
	if err != nil {
		s.t.Fatalf("the epilogue of job %s did not start within %v: %v\n%s", job, timeout, err, tailFile(s.path("log/slurmd.log"), 3000))
	}
	return at
}

// waitStamp waits at most timeout for a line "KEY... UNIXTIME" whose keys
// are key in file (a test's epilogue or housekeeping appends one when it
// starts) and returns its time.
func waitStamp(file string, timeout time.Duration, key ...string) (time.Time, error) {
	at, err, _ := testutil.PollRead(timeout, func() (time.Time, error) {
		data, err := os.ReadFile(file)
		if err != nil {
			return time.Time{}, err
		}
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) == len(key)+1 && slices.Equal(f[:len(key)], key) {
				sec, err := strconv.ParseFloat(f[len(key)], 64)
				if err != nil {
					return time.Time{}, fmt.Errorf("%s: %q: %w", file, line, err)
				}
				return time.Unix(0, int64(sec*1e9)), nil
			}
		}
		return time.Time{}, fmt.Errorf("no line for %s in %s", strings.Join(key, " "), file)
	}, func(time.Time) bool { return true })
	return at, err
}

// writeRealEpilog writes the hung real epilogue (it reads hang's file) to
// epilog.real.
func (s *slurmSite) writeRealEpilog(hangFile string) string {
	s.t.Helper()
	p := s.path("epilog.real")
	writeTemplate(s.t, "epilog.real", p, 0o755, map[string]string{"HangFile": hangFile, "Starts": s.path("epilog-starts")})
	return p
}

// writeGracewatchEpilog writes Slurm's Epilog= for gracewatch: the shipped
// wrapper packaging/examples/nodeagent/slurm-epilog.sh with the test's paths
// of nodeagent and the real epilogue, behind a two-line script that points
// GRACEWATCH_SOCKET at agent a. It returns the Epilog= path.
func (s *slurmSite) writeGracewatchEpilog(a *agent, realEpilog string) string {
	s.t.Helper()
	wrapper := s.writeEpilogWrapper(realEpilog)
	p := s.path("epilog.sh")
	writeTemplate(s.t, "epilog-gracewatch.sh", p, 0o755, map[string]string{"Socket": a.socket, "Wrapper": wrapper})
	return p
}

// writeEpilogWrapper writes the shipped wrapper
// (packaging/examples/nodeagent/slurm-epilog.sh) with the test's paths of
// nodeagent and of the real epilogue, and returns its path.
func (s *slurmSite) writeEpilogWrapper(realEpilog string) string {
	s.t.Helper()
	wrapper := s.path("slurm-epilog.sh")
	text := readExample(s.t, "nodeagent/slurm-epilog.sh")
	text = replaceOnce(s.t, text, "/usr/sbin/nodeagent", bins.nodeagent)
	text = replaceOnce(s.t, text, "/etc/slurm/epilog.real", realEpilog)
	if err := os.WriteFile(wrapper, []byte(text), 0o755); err != nil {
		s.t.Fatal(err)
	}
	return wrapper
}

// slurmActuators returns packaging/examples/aggregator/actuator-slurm.toml,
// running a copy of the shipped slurm-actuator.sh.
func (s *slurmSite) slurmActuators() string {
	s.t.Helper()
	script := s.path("slurm-actuator.sh")
	if err := os.WriteFile(script, []byte(actuatorScript(s.t, "aggregator/slurm-actuator.sh")), 0o755); err != nil {
		s.t.Fatal(err)
	}
	text := readExample(s.t, "aggregator/actuator-slurm.toml")
	if n := strings.Count(text, `"/etc/gracewatch/slurm-actuator.sh"`); n != 3 {
		s.t.Fatalf("actuator-slurm.toml runs /etc/gracewatch/slurm-actuator.sh %d times, want 3 (down, up and reason)", n)
	}
	return "\n" + strings.ReplaceAll(text, `"/etc/gracewatch/slurm-actuator.sh"`, fmt.Sprintf("%q", script))
}

func readExample(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "packaging", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// replaceOnce replaces the one command line use of old (a line that is not
// a comment) by new.
func replaceOnce(t testing.TB, text, old, new string) string {
	t.Helper()
	lines := strings.Split(text, "\n")
	n := 0
	for i, l := range lines {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") && strings.Contains(l, old) {
			lines[i] = strings.ReplaceAll(l, old, new)
			n++
		}
	}
	if n != 1 {
		t.Fatalf("the example uses %s on %d command lines, want 1", old, n)
	}
	return strings.Join(lines, "\n")
}
