// Command aggregator is gracewatch's central service and its command-line
// client. `aggregator serve` joins the mesh and serves the nodes' states over
// HTTP; the other subcommands call a running aggregator's HTTP API (see
// package aggregator). This file and its siblings only parse flags and wire
// the parts together.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/gracewatch/gracewatch/aggregator"
	"github.com/gracewatch/gracewatch/internal/cmdutil"
)

// Exit codes, as the nodeagent's.
const (
	exitOK    = cmdutil.ExitOK
	exitError = cmdutil.ExitError
	exitUsage = cmdutil.ExitUsage
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// cli is what a subcommand needs from the process.
type cli struct {
	stdout, stderr io.Writer
	getenv         func(string) string
}

// command is one subcommand.
type command struct {
	name     string
	args     string // argument synopsis
	summary  string
	run      func(c *cli, name string, args []string) int
	isClient bool // takes --url and --token-file
}

var commands []*command

func init() {
	commands = []*command{
		{name: "serve", args: "[--config FILE] [--listen ADDR]",
			summary: "run the aggregator", run: runServe},
		{name: "nodes", args: "[--state STATE] [--hostlist | --json] [--url URL] [--token-file FILE]",
			summary: "list the nodes and their states", run: runNodes, isClient: true},
		{name: "resume", args: "NODE --reason TEXT [--json] [--url URL] [--token-file FILE]",
			summary: "ask a node's agent to clear its DOWN latch", run: runAction, isClient: true},
		{name: "drain", args: "NODE --reason TEXT [--json] [--url URL] [--token-file FILE]",
			summary: "ask a node's agent to latch it DOWN", run: runAction, isClient: true},
		{name: "forget", args: "NODE --reason TEXT [--json] [--url URL] [--token-file FILE]",
			summary: "remove a dead or departed node (decommissioned, renamed) from every aggregator's view", run: runAction, isClient: true},
		{name: "job", args: "start --job ID --nodes HOSTLIST --expiration RFC3339|UNIX-SECONDS [--grace DUR] [--json] [--url URL] [--token-file FILE]",
			summary: "register a job with the agents of its nodes (the exec system's controller calls it once per job)", run: runJob, isClient: true},
		{name: "keygen", args: "FILE",
			summary: "write a new mesh key file (mode 0600; never overwrites)", run: runKeygen},
		{name: "site-key", args: "FILE",
			summary: "write a new site key file, the aggregators' secret that node keys derive from (mode 0600; never overwrites)", run: runSiteKey},
		{name: "node-key", args: "NODE [--out FILE] [--config FILE]",
			summary: "print (or write) the key a node proves its state with, derived from mesh.site_key_file", run: runNodeKey},
		{name: "public-key", args: "[--config FILE]",
			summary: "print the public keys nodes check aggregators with (their mesh.aggregator_keys_file)", run: runPublicKey},
		{name: "config", args: "check [--config FILE]",
			summary: "validate a configuration file and print the effective one", run: runConfigCheck},
		{name: "version", summary: "print the version", run: runVersion},
		{name: "help", args: "[COMMAND]", summary: "show this help or a command's", run: runHelp},
	}
}

func run(args []string, stdout, stderr io.Writer) int {
	c := &cli{stdout: stdout, stderr: stderr, getenv: os.Getenv}
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return exitOK
	}
	cmd := lookup(args[0])
	if cmd == nil {
		fmt.Fprintf(stderr, "aggregator: unknown command %q\n", args[0])
		usage(stderr)
		return exitUsage
	}
	return cmd.run(c, cmd.name, args[1:])
}

func lookup(name string) *command {
	for _, cmd := range commands {
		if cmd.name == name {
			return cmd
		}
	}
	return nil
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: aggregator COMMAND [FLAGS]")
	fmt.Fprintln(w, "\ncommands:")
	for _, cmd := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", cmd.name, cmd.summary)
	}
	fmt.Fprintf(w, "\nClient commands take --url URL (default: $%s, else %s) and\n", aggregator.URLEnv, aggregator.DefaultURL)
	fmt.Fprintf(w, "--token-file FILE (default: http.admin_token_file of %s, if readable;\n", aggregator.DefaultConfigPath)
	fmt.Fprintln(w, "for nodes, else http.read_token_file: the read token serves reads only).")
	fmt.Fprintln(w, "Exit status: 0 ok, 1 the aggregator refused or could not be reached, 2 usage error.")
	fmt.Fprintln(w, "Run 'aggregator help COMMAND' for a command's flags.")
}

func commandUsage(w io.Writer, cmd *command, fs *flag.FlagSet) {
	cmdutil.CommandUsage(w, "aggregator", cmd.name, cmd.args, cmd.summary, fs)
}

// flags is the flag set of one command.
type flags struct {
	*flag.FlagSet
	cmd       *command
	url       *string
	tokenFile *string
	args      []string // positional arguments, wherever they stood
}

func newFlags(name string) *flags {
	cmd := lookup(name)
	fs := flag.NewFlagSet("aggregator "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := &flags{FlagSet: fs, cmd: cmd}
	if cmd.isClient {
		f.url = fs.String("url", "", "the aggregator's base `URL`")
		f.tokenFile = fs.String("token-file", "", "`file` holding the bearer token (the admin token; for nodes, the read token does)")
	}
	return f
}

// parse parses args, flags and positional arguments in any order ("resume
// NODE --reason X" as well as "resume --reason X NODE"); when it returns
// ok=false the command exits with code.
func (f *flags) parse(c *cli, args []string) (code int, ok bool) {
	for {
		err := f.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			commandUsage(c.stdout, f.cmd, f.FlagSet)
			return exitOK, false
		}
		if err != nil {
			return c.usageError(f, "%v", err), false
		}
		if f.NArg() == 0 {
			return 0, true
		}
		rest := f.Args()
		if rest[0] == "--" {
			f.args = append(f.args, rest[1:]...)
			return 0, true
		}
		f.args = append(f.args, rest[0])
		args = rest[1:]
	}
}

// isSet reports whether the flag name was given.
func (f *flags) isSet(name string) bool { return cmdutil.IsSet(f.FlagSet, name) }

// nArgs requires exactly n positional arguments.
func (f *flags) nArgs(c *cli, n int, what string) (int, bool) {
	switch {
	case len(f.args) < n:
		return c.usageError(f, "%s is required", what), false
	case len(f.args) > n:
		return c.usageError(f, "unexpected argument %q", f.args[n]), false
	}
	return 0, true
}

// usageError prints a usage error naming the command and exits 2.
func (c *cli) usageError(f *flags, format string, a ...any) int {
	return c.out().UsageError(f.cmd.name, f.cmd.args, format, a...)
}

// fail prints an error of the aggregator or of the connection and exits 1.
func (c *cli) fail(err error) int {
	return c.out().Fail(err)
}

// out is where c writes, for cmdutil.
func (c *cli) out() cmdutil.Out {
	return cmdutil.Out{Prog: "aggregator", Stdout: c.stdout, Stderr: c.stderr}
}
