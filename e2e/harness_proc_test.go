package e2e

// A gracewatch process under test (proc), ended by its pid, and the end of
// its log that a failed test shows.

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// proc is a gracewatch process under test, ended by its pid.
type proc struct {
	t    testing.TB
	name string
	args []string
	cmd  *exec.Cmd
	logs *testutil.SyncBuffer
}

func (p *proc) start() {
	p.t.Helper()
	p.cmd = exec.Command(p.args[0], p.args[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
}

func (p *proc) running() bool { return p.cmd != nil && p.cmd.ProcessState == nil }

// stop sends SIGTERM (SIGCONT first, in case the test froze it), then
// SIGKILL after 5 s.
func (p *proc) stop() {
	if !p.running() {
		return
	}
	testutil.Stop(p.cmd, 5*time.Second)
}

func (p *proc) crash() {
	p.cmd.Process.Kill()
	p.cmd.Wait()
}

func (p *proc) dumpIfFailed() {
	if p.t.Failed() {
		p.t.Logf("=== logs of %s:\n%s", p.name, trimLog(p.logs.String(), strings.HasPrefix(p.name, "agg")))
	}
}

// memberlistNoise are log lines of every member about every other: the
// first to go when a failed test's log is trimmed.
var memberlistNoise = []string{`"msg":"member joined"`, `"msg":"member gone"`, `push/pull sync`, `"msg":"Stream connection`}

// trimLog keeps the end of a process's log for a failed test's output: up
// to 20 kB of an agent's, 200 kB of an aggregator's (what it decided about
// every node is what a failure of a large cluster test is read from), the
// mesh's membership lines dropped first.
func trimLog(logs string, aggregator bool) string {
	limit := 20000
	if aggregator {
		limit = 200000
	}
	if len(logs) <= limit {
		return logs
	}
	var kept []string
	dropped := 0
	for _, line := range strings.Split(logs, "\n") {
		if slices.ContainsFunc(memberlistNoise, func(n string) bool { return strings.Contains(line, n) }) {
			dropped++
			continue
		}
		kept = append(kept, line)
	}
	logs = strings.Join(kept, "\n")
	if len(logs) > limit {
		logs = "...\n" + logs[len(logs)-limit:]
	}
	return fmt.Sprintf("(%d membership lines left out)\n%s", dropped, logs)
}
