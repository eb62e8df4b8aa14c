// Command nodeagent is the client of gracewatch's node agent: the commands
// that an exec system runs for every job (job start, job end, epilog) and
// the administrator's (status, diagnose, resume), over the agent's socket.
// `nodeagent serve` and `nodeagent config check` re-execute the daemon,
// nodeagentd. This binary links none of the daemon's libraries, so that it
// starts fast (see agent/cli).
package main

import (
	"os"

	"github.com/gracewatch/gracewatch/agent/cli"
)

func main() {
	os.Exit(cli.Run(os.Args[1:], os.Stdout, os.Stderr, nil))
}
