// Package cli is the nodeagent command line: the client commands that talk
// to the agent over its local socket (see agent/api), and the flags of the
// two that the daemon alone can run, serve and config check.
//
// Two binaries run it. nodeagentd (cmd/nodeagentd) is the daemon: it links
// the agent and passes a Daemon. nodeagent (cmd/nodeagent), the client that
// an exec system starts for every job (job start, job end, epilog), links
// none of the server's libraries, whose initialisation alone took longer
// than the rest of its start (BENCHMARKS.md, "Epilogue latency"); it passes
// nil and re-executes nodeagentd for serve and config check. This package
// must therefore not import the agent, the mesh or the metrics (a test of
// cmd/nodeagent keeps it so).
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/internal/cmdutil"
	"github.com/gracewatch/gracewatch/internal/config"
)

// Exit codes.
const (
	exitOK    = cmdutil.ExitOK
	exitError = cmdutil.ExitError
	exitUsage = cmdutil.ExitUsage
	// exitTimeout is what timeout(1) uses: the epilogue outlived --timeout.
	exitTimeout = 124
)

// defaultConfigPath is read for the socket path (clients) and the
// configuration (serve) when it exists and --config is not given.
const defaultConfigPath = "/etc/gracewatch/nodeagent.toml"

// Daemon is what only the daemon binary links: running the agent and
// checking its configuration. Each function returns the exit code and
// writes through out.
type Daemon struct {
	// Serve runs the agent until SIGINT or SIGTERM.
	Serve func(o ServeOptions, out cmdutil.Out) int
	// ConfigCheck validates the configuration file at path (empty: the
	// defaults alone) as Serve would, and prints the effective one.
	ConfigCheck func(path string, out cmdutil.Out) int
}

// ServeOptions are the flags of serve, checked (the paths are absolute).
type ServeOptions struct {
	// Config is the configuration file: --config, else
	// /etc/gracewatch/nodeagent.toml if it exists, else empty (the
	// defaults).
	Config string
	// Socket, StateDir, CgroupRoot and Node override the configuration's
	// socket, state_dir, cgroup.root and node_name when not empty.
	Socket, StateDir, CgroupRoot, Node string
}

// cli is what a subcommand needs from the process.
type cli struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	now            func() time.Time
	daemon         *Daemon
}

// command is one subcommand.
type command struct {
	name     string // "job start"
	args     string // argument synopsis
	summary  string
	run      func(c *cli, name string, args []string) int
	isClient bool // takes --socket, --config and --connect-wait
	// connectWait is the default of --connect-wait: the commands an exec
	// system runs wait for a restarting agent, the others fail at once.
	connectWait time.Duration
}

var commands []*command

func init() {
	commands = []*command{
		{name: "serve", args: "[--config FILE] [--socket PATH] [--state-dir DIR] [--cgroup-root PATH] [--node NAME]",
			summary: "run the node agent", run: runServe},
		{name: "job start", args: "--job ID (--expiration RFC3339|UNIX-SECONDS | --R FILE) [--grace DUR] [--cgroup PATH] [--json]",
			summary: "register a job and its expiration", run: runJobStart, isClient: true, connectWait: execConnectWait},
		{name: "job update", args: "--job ID (--expiration RFC3339|UNIX-SECONDS | --R FILE | --cgroup PATH) [--json]",
			summary: "move a registered job's expiration (its time limit changed), or add its cgroup", run: runJobUpdate, isClient: true, connectWait: execConnectWait},
		{name: "job end", args: "--job ID [--json]",
			summary: "record that a job's tasks ended; its teardown starts", run: runJobEnd, isClient: true, connectWait: execConnectWait},
		{name: "epilog", args: "--job ID [--timeout DUR] [--cgroup PATH] -- CMD [ARGS...]",
			summary: "run an epilogue under the agent's supervision and exit with its status", run: runEpilog, isClient: true, connectWait: execConnectWait},
		{name: "status", args: "[--json]",
			summary: "show the node's teardown state, jobs and hung processes", run: runStatus, isClient: true},
		{name: "diagnose", args: "[--job ID] [--json]",
			summary: "show diagnostics of hung teardowns", run: runDiagnose, isClient: true},
		{name: "resume", args: "--reason TEXT [--json]",
			summary: "clear the node's DOWN latch", run: runResume, isClient: true},
		{name: "config check", args: "[--config FILE]",
			summary: "validate a configuration file and print the effective configuration", run: runConfigCheck},
		{name: "version", summary: "print the version", run: runVersion},
		{name: "help", args: "[COMMAND]", summary: "show this help or a command's", run: runHelp},
	}
}

// Run runs the command line args (without the program's name) and returns
// the exit status. d nil: serve and config check re-execute the daemon
// binary (see daemonPath) with the same arguments.
func Run(args []string, stdout, stderr io.Writer, d *Daemon) int {
	c := &cli{stdout: stdout, stderr: stderr, getenv: os.Getenv, now: time.Now, daemon: d}
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return exitOK
	}
	globals, args, err := leadingFlags(args)
	if err != nil {
		fmt.Fprintf(stderr, "nodeagent: %v\n", err)
		usage(stderr)
		return exitUsage
	}
	if len(args) == 0 {
		fmt.Fprintf(stderr, "nodeagent: a command is required after %s\n", strings.Join(globals, " "))
		usage(stderr)
		return exitUsage
	}
	cmd, rest := findCommand(args)
	if cmd == nil {
		if args[0] == "job" && len(args) == 1 {
			fmt.Fprintln(stderr, "nodeagent: job needs a subcommand: start or end")
			usage(stderr)
			return exitUsage
		}
		name := args[0]
		if name == "job" {
			name += " " + args[1]
		}
		fmt.Fprintf(stderr, "nodeagent: unknown command %q\n", name)
		usage(stderr)
		return exitUsage
	}
	// Flags given before the command are the command's, as if after it:
	// `nodeagent --socket S status` is `nodeagent status --socket S`.
	return cmd.run(c, cmd.name, append(globals, rest...))
}

// globalFlags are the flags that may come before the command: those every
// client command takes. Each takes a value.
var globalFlags = []string{"socket", "config", "connect-wait"}

// leadingFlags splits the flags before the command (and their values) from
// the rest of args. A flag there that is not a global one is an error.
func leadingFlags(args []string) (flags, rest []string, err error) {
	for len(args) > 0 && strings.HasPrefix(args[0], "-") && args[0] != "-" && args[0] != "--" {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
		if !slices.Contains(globalFlags, name) {
			return nil, nil, fmt.Errorf("flag %s before the command: only --%s may come first; put it after the command",
				args[0], strings.Join(globalFlags, ", --"))
		}
		n := 1
		if !hasValue {
			if len(args) < 2 {
				return nil, nil, fmt.Errorf("flag %s needs a value", args[0])
			}
			n = 2
		}
		flags = append(flags, args[:n]...)
		args = args[n:]
	}
	return flags, args, nil
}

// findCommand matches the longest command name at the start of args.
func findCommand(args []string) (*command, []string) {
	for _, cmd := range commands {
		words := strings.Fields(cmd.name)
		if len(args) >= len(words) && strings.Join(args[:len(words)], " ") == cmd.name {
			return cmd, args[len(words):]
		}
	}
	return nil, nil
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: nodeagent COMMAND [FLAGS]")
	fmt.Fprintln(w, "\ncommands:")
	for _, cmd := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", cmd.name, cmd.summary)
	}
	fmt.Fprintf(w, "\nClient commands take --socket PATH (default: $%s, else the socket of the\n", api.SocketEnv)
	fmt.Fprintf(w, "file given by --config or of %s if it exists, else %s).\n", defaultConfigPath, api.DefaultSocketPath)
	fmt.Fprintln(w, "Exit status: 0 ok, 1 the agent refused or could not be reached, 2 usage error;")
	fmt.Fprintln(w, "epilog exits with its command's status, or 124 after --timeout.")
	fmt.Fprintln(w, "Run 'nodeagent help COMMAND' for a command's flags.")
}

func commandUsage(w io.Writer, cmd *command, fs *flag.FlagSet) {
	cmdutil.CommandUsage(w, "nodeagent", cmd.name, cmd.args, cmd.summary, fs)
}

func lookup(name string) *command {
	for _, cmd := range commands {
		if cmd.name == name {
			return cmd
		}
	}
	return nil
}

// flags is the flag set of one command.
type flags struct {
	*flag.FlagSet
	cmd         *command
	socket      *string
	config      *string
	connectWait *time.Duration
}

// execConnectWait is how long the commands an exec system runs (job start,
// job end, epilog) wait for an agent that is not there: a restart, with
// [api] stop_wait (20 s) and the start of the next agent, fits in it.
const execConnectWait = 60 * time.Second

func newFlags(name string) *flags {
	cmd := lookup(name)
	fs := flag.NewFlagSet("nodeagent "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := &flags{FlagSet: fs, cmd: cmd}
	if cmd.isClient {
		f.socket = fs.String("socket", "", "`path` of the agent's socket")
		f.config = fs.String("config", "", "configuration `file` to take the socket path from")
		f.connectWait = fs.Duration("connect-wait", cmd.connectWait,
			"wait up to `duration` for an agent that is not running (restarting) before failing")
	}
	return f
}

// parse parses args; when it returns ok=false the command exits with code.
func (f *flags) parse(c *cli, args []string) (code int, ok bool) {
	err := f.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		commandUsage(c.stdout, f.cmd, f.FlagSet)
		return exitOK, false
	}
	if err != nil {
		return c.usageError(f, "%v", err), false
	}
	if f.connectWait != nil && *f.connectWait < 0 {
		return c.usageError(f, "--connect-wait: %v is negative", *f.connectWait), false
	}
	return 0, true
}

// isSet reports whether the flag name was given.
func (f *flags) isSet(name string) bool { return cmdutil.IsSet(f.FlagSet, name) }

// noArgs refuses positional arguments.
func (f *flags) noArgs(c *cli) (int, bool) {
	if f.NArg() > 0 {
		return c.usageError(f, "unexpected argument %q", f.Arg(0)), false
	}
	return 0, true
}

// usageError prints a usage error naming the command and exits 2.
func (c *cli) usageError(f *flags, format string, a ...any) int {
	return c.out().UsageError(f.cmd.name, f.cmd.args, format, a...)
}

// fail prints an error of the agent or of the connection and exits 1.
func (c *cli) fail(err error) int {
	return c.out().Fail(err)
}

// out is where c writes, for cmdutil.
func (c *cli) out() cmdutil.Out {
	return cmdutil.Out{Prog: "nodeagent", Stdout: c.stdout, Stderr: c.stderr}
}

// client returns a client of the agent's socket (see socketPath) that
// waits --connect-wait for an agent that is not there.
func (c *cli) client(f *flags) (*api.Client, error) {
	path, err := c.socketPath(f)
	if err != nil {
		return nil, err
	}
	cl := api.NewClient(path)
	cl.SetConnectWait(*f.connectWait)
	return cl, nil
}

// socketPath resolves the socket path: --socket, else the socket key of an
// explicit --config, else $GRACEWATCH_SOCKET, else the socket key of
// /etc/gracewatch/nodeagent.toml if it exists, else the default.
func (c *cli) socketPath(f *flags) (string, error) {
	switch {
	case *f.socket != "":
		return *f.socket, nil
	case *f.config != "":
		return socketFromConfig(*f.config)
	}
	if s := c.getenv(api.SocketEnv); s != "" {
		return s, nil
	}
	if _, err := os.Stat(defaultConfigPath); err == nil {
		return socketFromConfig(defaultConfigPath)
	}
	return api.DefaultSocketPath, nil
}

// socketFromConfig reads the socket key of a configuration file. Only that
// key is decoded: the file is the daemon's to validate (serve and config
// check do, strictly), and a client that refused a key it does not know
// would fail every job's epilog for a typo that the running agent never
// read. A file that is not TOML is still an error naming its line.
func socketFromConfig(path string) (string, error) {
	var cfg struct {
		Socket string `toml:"socket"`
	}
	if err := config.LoadKeys(path, &cfg); err != nil {
		return "", err
	}
	if cfg.Socket == "" {
		return api.DefaultSocketPath, nil
	}
	return cfg.Socket, nil
}

// ctx returns the context of a client call.
func (c *cli) ctx() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}
