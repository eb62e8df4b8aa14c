// Package cli is the aggregator's command line: `aggregator serve` joins the
// mesh and serves the nodes' states over HTTP, the other commands call a
// running aggregator's HTTP API (api.Client) or make and print keys.
// cmd/aggregator runs it; it runs on internal/cmdutil's command framework,
// as the nodeagent's command line (agent/cli) does.
package cli

import (
	"fmt"
	"io"
	"os"

	"github.com/gracewatch/gracewatch/aggregator"
	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/internal/cmdutil"
)

// Exit codes, as the nodeagent's.
const (
	exitOK    = cmdutil.ExitOK
	exitError = cmdutil.ExitError
	exitUsage = cmdutil.ExitUsage
)

// cli is what a subcommand needs from the process.
type cli struct {
	stdout, stderr io.Writer
	getenv         func(string) string
}

// command is one subcommand.
type command = cmdutil.Command[*cli]

// program is the aggregator command line.
var program = &cmdutil.Program[*cli]{Name: "aggregator", Footer: usageFooter}

func init() {
	program.Commands = []*command{
		{Name: "serve", Args: "[--config FILE] [--listen ADDR]",
			Summary: "run the aggregator", Run: runServe},
		{Name: "nodes", Args: "[--state STATE] [--hostlist | --json] [--url URL] [--token-file FILE]",
			Summary: "list the nodes and their states", Run: runNodes, Client: true},
		{Name: "reservations", Args: "[--json] [--url URL] [--token-file FILE]",
			Summary: "list the scheduler's reservations gracewatch keeps on nodes tearing down", Run: runReservations, Client: true},
		{Name: "incidents", Args: "[--json] [--url URL] [--token-file FILE]",
			Summary: "list the incidents (DOWN nodes grouped by cause) and the drains the blast-radius limit holds", Run: runIncidents, Client: true},
		{Name: "incident", Args: "confirm ID --reason TEXT [--for DURATION] [--json] [--url URL] [--token-file FILE]",
			Summary: "let the drains of an incident's nodes held by the blast-radius limit through", Run: runIncident, Client: true},
		{Name: "grace", Args: "[--from WHEN] [--to WHEN] [--nodes HOSTLIST] [--g LIST] [--top-g G] [--top N] [--json] [--url URL] [--token-file FILE]",
			Summary: "the grace advisor: what each G would have done over the teardown history, and the smallest G that drains only really hung nodes", Run: runGrace, Client: true},
		{Name: "resume", Args: "NODE --reason TEXT [--json] [--url URL] [--token-file FILE]",
			Summary: "ask a node's agent to clear its DOWN latch", Run: runAction, Client: true},
		{Name: "drain", Args: "NODE --reason TEXT [--json] [--url URL] [--token-file FILE]",
			Summary: "ask a node's agent to latch it DOWN", Run: runAction, Client: true},
		{Name: "forget", Args: "NODE --reason TEXT [--json] [--url URL] [--token-file FILE]",
			Summary: "remove a dead or departed node (decommissioned, renamed) from every aggregator's view", Run: runAction, Client: true},
		{Name: "job", Args: "start --job ID --nodes HOSTLIST --expiration RFC3339|UNIX-SECONDS [--grace DUR] [--json] [--url URL] [--token-file FILE]",
			Summary: "register a job with the agents of its nodes (the exec system's controller calls it once per job)", Run: runJob, Client: true},
		{Name: "keygen", Args: "FILE",
			Summary: "write a new mesh key file (mode 0600; never overwrites)", Run: runKeygen},
		{Name: "site-key", Args: "FILE",
			Summary: "write a new site key file, the aggregators' secret that node keys derive from (mode 0600; never overwrites)", Run: runKeygen},
		{Name: "node-key", Args: "NODE [--out FILE] [--config FILE]",
			Summary: "print (or write) the key a node proves its state with, derived from mesh.site_key_file", Run: runNodeKey},
		{Name: "public-key", Args: "[--config FILE]",
			Summary: "print the public keys nodes check aggregators with (their mesh.aggregator_keys_file)", Run: runPublicKey},
		{Name: "config", Args: "check [--config FILE]",
			Summary: "validate a configuration file and print the effective one", Run: runConfigCheck},
		{Name: "version", Summary: "print the version", Run: runVersion},
		{Name: "help", Args: "[COMMAND]", Summary: "show this help or a command's", Run: runHelp},
	}
}

// Run runs the command line args (without the program's name) and returns
// the exit status.
func Run(args []string, stdout, stderr io.Writer) int {
	c := &cli{stdout: stdout, stderr: stderr, getenv: os.Getenv}
	if code, ok := program.Start(c.out(), args); !ok {
		return code
	}
	cmd := program.Lookup(args[0])
	if cmd == nil {
		return program.UsageFail(c.out(), "unknown command %q", args[0])
	}
	return cmd.Run(c, cmd.Name, args[1:])
}

// usageFooter is what the aggregator's usage says after the commands.
func usageFooter(w io.Writer) {
	fmt.Fprintf(w, "\nClient commands take --url URL (default: $%s, else %s) and\n", api.URLEnv, api.DefaultURL)
	fmt.Fprintf(w, "--token-file FILE (default: http.admin_token_file of %s, if readable;\n", aggregator.DefaultConfigPath)
	fmt.Fprintln(w, "for nodes, else http.read_token_file: the read token serves reads only).")
	fmt.Fprintln(w, "Exit status: 0 ok, 1 the aggregator refused or could not be reached, 2 usage error.")
	fmt.Fprintln(w, "Run 'aggregator help COMMAND' for a command's flags.")
}

// flags is the flag set of one command, with the connection flags of a
// client command. Positional arguments may stand among the flags.
type flags struct {
	*cmdutil.Flags
	url       *string
	tokenFile *string
}

func (c *cli) newFlags(name string) *flags {
	cmd := program.Lookup(name)
	f := &flags{Flags: cmdutil.NewFlags(c.out(), cmd)}
	f.Interleaved = true
	if cmd.Client {
		f.url = f.String("url", "", "the aggregator's base `URL`")
		f.tokenFile = f.String("token-file", "", "`file` holding the bearer token (the admin token; for nodes, the read token does)")
	}
	return f
}

// fail prints an error of the aggregator or of the connection and exits 1.
func (c *cli) fail(err error) int {
	return c.out().Fail(err)
}

// out is where c writes, for cmdutil.
func (c *cli) out() cmdutil.Out {
	return cmdutil.Out{Prog: "aggregator", Stdout: c.stdout, Stderr: c.stderr}
}

func runHelp(c *cli, name string, args []string) int { return program.Help(c, c.out(), args) }
