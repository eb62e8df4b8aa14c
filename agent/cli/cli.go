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
type command = cmdutil.Command[*cli]

// program is the nodeagent command line.
var program = &cmdutil.Program[*cli]{Name: "nodeagent", Footer: usageFooter}

func init() {
	program.Commands = []*command{
		{Name: "serve", Args: "[--config FILE] [--socket PATH] [--state-dir DIR] [--cgroup-root PATH] [--node NAME]",
			Summary: "run the node agent", Run: runServe},
		{Name: "job start", Args: "--job ID (--expiration RFC3339|UNIX-SECONDS | --R FILE) [--grace DUR] [--cgroup PATH] [--user USER] [--json]",
			Summary: "register a job and its expiration", Run: runJobStart, Client: true},
		{Name: "job update", Args: "--job ID (--expiration RFC3339|UNIX-SECONDS | --R FILE | --cgroup PATH | --user USER) [--json]",
			Summary: "move a registered job's expiration (its time limit changed), or add its cgroup", Run: runJobUpdate, Client: true},
		{Name: "job end", Args: "--job ID [--json]",
			Summary: "record that a job's tasks ended; its teardown starts", Run: runJobEnd, Client: true},
		{Name: "epilog", Args: "--job ID [--timeout DUR] [--cgroup PATH] [--user USER] -- CMD [ARGS...]",
			Summary: "run an epilogue under the agent's supervision and exit with its status", Run: runEpilog, Client: true},
		{Name: "status", Args: "[--json]",
			Summary: "show the node's teardown state, jobs and hung processes", Run: runStatus, Client: true},
		{Name: "diagnose", Args: "[--job ID] [--json]",
			Summary: "show diagnostics of hung teardowns", Run: runDiagnose, Client: true},
		{Name: "resume", Args: "--reason TEXT [--json]",
			Summary: "clear the node's DOWN latch", Run: runResume, Client: true},
		{Name: "config check", Args: "[--config FILE]",
			Summary: "validate a configuration file and print the effective configuration", Run: runConfigCheck},
		{Name: "version", Summary: "print the version", Run: runVersion},
		{Name: "help", Args: "[COMMAND]", Summary: "show this help or a command's", Run: runHelp},
	}
}

// execCommands are the commands an exec system runs: they wait
// execConnectWait for a restarting agent, the others fail at once.
var execCommands = []string{"job start", "job update", "job end", "epilog"}

// Run runs the command line args (without the program's name) and returns
// the exit status. d nil: serve and config check re-execute the daemon
// binary (see daemonPath) with the same arguments.
func Run(args []string, stdout, stderr io.Writer, d *Daemon) int {
	c := &cli{stdout: stdout, stderr: stderr, getenv: os.Getenv, now: time.Now, daemon: d}
	out := c.out()
	if code, ok := program.Start(out, args); !ok {
		return code
	}
	globals, args, err := leadingFlags(args)
	if err != nil {
		return program.UsageFail(out, "%v", err)
	}
	if len(args) == 0 {
		return program.UsageFail(out, "a command is required after %s", strings.Join(globals, " "))
	}
	cmd, rest := program.Find(args)
	if cmd == nil {
		if args[0] == "job" && len(args) == 1 {
			return program.UsageFail(out, "job needs a subcommand: start or end")
		}
		name := args[0]
		if name == "job" {
			name += " " + args[1]
		}
		return program.UsageFail(out, "unknown command %q", name)
	}
	// Flags given before the command are the command's, as if after it:
	// `nodeagent --socket S status` is `nodeagent status --socket S`.
	return cmd.Run(c, cmd.Name, append(globals, rest...))
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

// usageFooter is what nodeagent's usage says after the commands.
func usageFooter(w io.Writer) {
	fmt.Fprintf(w, "\nClient commands take --socket PATH (default: $%s, else the socket of the\n", api.SocketEnv)
	fmt.Fprintf(w, "file given by --config or of %s if it exists, else %s).\n", defaultConfigPath, api.DefaultSocketPath)
	fmt.Fprintln(w, "Exit status: 0 ok, 1 the agent refused or could not be reached, 2 usage error;")
	fmt.Fprintln(w, "epilog exits with its command's status, or 124 after --timeout.")
	fmt.Fprintln(w, "Run 'nodeagent help COMMAND' for a command's flags.")
}

// flags is the flag set of one command, with the connection flags of a
// client command.
type flags struct {
	*cmdutil.Flags
	socket      *string
	config      *string
	connectWait *time.Duration
}

// execConnectWait is how long the commands an exec system runs (job start,
// job end, epilog) wait for an agent that is not there: a restart, with
// [api] stop_wait (20 s) and the start of the next agent, fits in it.
const execConnectWait = 60 * time.Second

func (c *cli) newFlags(name string) *flags {
	cmd := program.Lookup(name)
	f := &flags{Flags: cmdutil.NewFlags(c.out(), cmd)}
	if cmd.Client {
		wait := time.Duration(0)
		if slices.Contains(execCommands, name) {
			wait = execConnectWait
		}
		f.socket = f.String("socket", "", "`path` of the agent's socket")
		f.config = f.String("config", "", "configuration `file` to take the socket path from")
		f.connectWait = f.Duration("connect-wait", wait,
			"wait up to `duration` for an agent that is not running (restarting) before failing")
		f.Check = func() error {
			if *f.connectWait < 0 {
				return fmt.Errorf("--connect-wait: %v is negative", *f.connectWait)
			}
			return nil
		}
	}
	return f
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

// call is a client command's call of the agent: on a client of its socket
// (see client), call runs fn and prints the result as JSON with --json
// (asJSON), else with text.
func call[T any](c *cli, f *flags, asJSON bool, fn func(context.Context, *api.Client) (T, error), text func(io.Writer, T)) int {
	cl, err := c.client(f)
	if err != nil {
		return c.fail(err)
	}
	defer cl.Close()
	return cmdutil.Call(c.out(), asJSON, func(ctx context.Context) (T, error) { return fn(ctx, cl) }, text)
}
