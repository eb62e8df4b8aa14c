// Command nodeagentd is gracewatch's node agent daemon: `nodeagentd serve`
// runs the agent (the packaged unit starts it so), `nodeagentd config
// check` validates its configuration. It takes every command of nodeagent
// (agent/cli); nodeagent, the light client, re-executes it for these two.
// This file only wires the parts together (agent.Daemon).
package main

import (
	"os"

	"github.com/gracewatch/gracewatch/agent"
	"github.com/gracewatch/gracewatch/agent/cgroup"
	"github.com/gracewatch/gracewatch/agent/cli"
)

func main() {
	// First of all: when the agent re-executes itself as the shim that
	// starts an epilogue inside its cgroup, this does not return.
	cgroup.RunShimIfRequested()
	os.Exit(cli.Run(os.Args[1:], os.Stdout, os.Stderr, agent.Daemon()))
}
