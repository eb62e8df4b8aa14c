// Command aggregator is gracewatch's central service and its command-line
// client (package aggregator/cli): `aggregator serve` joins the mesh and
// serves the nodes' states over HTTP; the other subcommands call a running
// aggregator's HTTP API. This file only wires the command line to the
// process.
package main

import (
	"os"

	"github.com/gracewatch/gracewatch/aggregator/cli"
)

func main() {
	os.Exit(cli.Run(os.Args[1:], os.Stdout, os.Stderr))
}
