package main

import (
	"context"
	"fmt"
	"log/slog"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/gracewatch/gracewatch/aggregator"
	"github.com/gracewatch/gracewatch/internal/cmdutil"
	"github.com/gracewatch/gracewatch/internal/config"
	"github.com/gracewatch/gracewatch/internal/version"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

func runServe(c *cli, name string, args []string) int {
	f := newFlags(name)
	cfgPath := f.String("config", "", "configuration `file` (default "+aggregator.DefaultConfigPath+" if it exists)")
	listen := f.String("listen", "", "HTTP `address` (overrides http.listen)")
	if code, ok := f.parse(c, args); !ok {
		return code
	}
	if code, ok := f.nArgs(c, 0, ""); !ok {
		return code
	}
	path := cmdutil.ConfigPath(*cfgPath, aggregator.DefaultConfigPath)
	cfg, err := aggregator.LoadConfig(path)
	if err != nil {
		return c.fail(err)
	}
	if *listen != "" {
		cfg.HTTP.Listen = *listen
		if err := cfg.Validate(); err != nil {
			return c.fail(fmt.Errorf("configuration with flags: %w", err))
		}
	}
	if cfg.StateDir == "" {
		// systemd's StateDirectory= (the packaged unit's).
		cfg.StateDir, _, _ = strings.Cut(c.getenv("STATE_DIRECTORY"), ":")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		// After the first signal, a second one kills at once.
		<-ctx.Done()
		stop()
	}()
	if err := aggregator.Run(ctx, cfg, aggregator.RunOptions{Logger: newLogger(c, cfg), ConfigPath: path}); err != nil {
		return c.fail(err)
	}
	return exitOK
}

func newLogger(c *cli, cfg aggregator.Config) *slog.Logger {
	return cmdutil.NewLogger(c.stderr, cfg.LogFormat, cfg.LogLevel).With("aggregator", cfg.Name)
}

func runNodes(c *cli, name string, args []string) int {
	f := newFlags(name)
	state := f.String("state", "", "only nodes in this `state`: up, teardown, down or unreachable")
	hostlist := f.Bool("hostlist", false, "print a compressed hostlist, e.g. node[3,17-19]")
	asJSON := f.Bool("json", false, "print the nodes as JSON")
	if code, ok := f.parse(c, args); !ok {
		return code
	}
	if code, ok := f.nArgs(c, 0, ""); !ok {
		return code
	}
	var st aggregator.State
	if *state != "" {
		var err error
		if st, err = aggregator.ParseState(*state); err != nil {
			return c.usageError(f, "--state: %v", err)
		}
	}
	if *hostlist && *asJSON {
		return c.usageError(f, "give one of --hostlist and --json, not both")
	}
	cl, err := c.client(f, false)
	if err != nil {
		return c.fail(err)
	}
	ctx := context.Background()
	if *hostlist {
		hl, err := cl.Hostlist(ctx, st)
		if err != nil {
			return c.fail(err)
		}
		fmt.Fprintln(c.stdout, hl)
		return exitOK
	}
	nodes, err := cl.Nodes(ctx, st)
	if err != nil {
		return c.fail(err)
	}
	if *asJSON {
		return c.printJSON(aggregator.NodeList{Nodes: nodes})
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tSCHEDULABLE\tSINCE\tFREE_AT\tREASON")
	for _, n := range nodes {
		sched := "no"
		switch {
		case n.State == aggregator.StateTeardown && n.Schedulable:
			sched = "from free_at"
		case n.Schedulable:
			sched = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, n.State, sched, timeOrDash(n.Since), timeOrDash(n.FreeAt), orDash(n.Reason))
	}
	tw.Flush()
	return exitOK
}

func runAction(c *cli, name string, args []string) int {
	f := newFlags(name)
	reason := f.String("reason", "", "why (required, logged; a drain's reason becomes the node's)")
	asJSON := f.Bool("json", false, "print the node as JSON")
	if code, ok := f.parse(c, args); !ok {
		return code
	}
	if code, ok := f.nArgs(c, 1, "NODE"); !ok {
		return code
	}
	if !f.isSet("reason") {
		return c.usageError(f, "--reason is required")
	}
	if len(*reason) > aggregator.MaxReasonBytes {
		return c.usageError(f, "--reason: %d bytes, longer than %d", len(*reason), aggregator.MaxReasonBytes)
	}
	cl, err := c.client(f, true)
	if err != nil {
		return c.fail(err)
	}
	node := f.args[0]
	ctx := context.Background()
	var n aggregator.Node
	switch name {
	case "resume":
		n, err = cl.Resume(ctx, node, *reason)
	case "drain":
		n, err = cl.Drain(ctx, node, *reason)
	case "forget":
		if err = cl.Forget(ctx, node, *reason); err != nil {
			return c.fail(err)
		}
		if *asJSON {
			return c.printJSON(aggregator.Forgotten{Name: node})
		}
		fmt.Fprintf(c.stdout, "%s forgotten\n", node)
		return exitOK
	}
	if err != nil {
		return c.fail(err)
	}
	if *asJSON {
		return c.printJSON(n)
	}
	verb := map[string]string{"resume": "resumed", "drain": "drained"}[name]
	fmt.Fprintf(c.stdout, "%s %s: state %s", n.Name, verb, n.State)
	if n.Reason != "" {
		fmt.Fprintf(c.stdout, " (%s)", n.Reason)
	}
	fmt.Fprintln(c.stdout)
	return exitOK
}

// client resolves the URL (--url, else $GRACEWATCH_AGGREGATOR, else the
// default) and the token (--token-file, else a token file of the default
// configuration file: http.admin_token_file, and for a read command, which
// a read token serves too, http.read_token_file when the admin one cannot
// be read). needToken (an admin command) makes an admin token file that
// cannot be read an error; without it the request goes without a token.
func (c *cli) client(f *flags, needToken bool) (*aggregator.Client, error) {
	url := *f.url
	if url == "" {
		url = c.getenv(aggregator.URLEnv)
	}
	if url == "" {
		url = aggregator.DefaultURL
	}
	var token []byte
	switch {
	case *f.tokenFile != "":
		t, err := aggregator.LoadToken(*f.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		token = t
	default:
		h, ok := defaultHTTPConfig()
		if !ok {
			break
		}
		if h.AdminTokenFile != "" {
			t, err := aggregator.LoadToken(h.AdminTokenFile)
			if err != nil && needToken {
				return nil, fmt.Errorf("%w (http.admin_token_file of %s; give --token-file)", err, aggregator.DefaultConfigPath)
			}
			token = t
		}
		if token == nil && !needToken && h.ReadTokenFile != "" {
			token, _ = aggregator.LoadToken(h.ReadTokenFile)
		}
	}
	return aggregator.NewClient(url, string(token))
}

// defaultHTTPConfig returns the [http] table of the default configuration
// file, if it exists and decodes.
func defaultHTTPConfig() (aggregator.HTTPConfig, bool) {
	cfg := aggregator.DefaultConfig()
	if err := config.Load(aggregator.DefaultConfigPath, &cfg); err != nil {
		return cfg.HTTP, false
	}
	return cfg.HTTP, true
}

func runKeygen(c *cli, name string, args []string) int {
	f := newFlags(name)
	if code, ok := f.parse(c, args); !ok {
		return code
	}
	if code, ok := f.nArgs(c, 1, "FILE"); !ok {
		return code
	}
	if err := mesh.WriteKeyFile(f.args[0]); err != nil {
		return c.fail(err)
	}
	fmt.Fprintf(c.stdout, "wrote a new mesh key to %s (mode 0600); copy it to every node and aggregator, and set mesh.keyring\n", f.args[0])
	return exitOK
}

func runVersion(c *cli, name string, args []string) int {
	f := newFlags(name)
	if code, ok := f.parse(c, args); !ok {
		return code
	}
	if code, ok := f.nArgs(c, 0, ""); !ok {
		return code
	}
	fmt.Fprintf(c.stdout, "aggregator %s (%s, %s/%s)\n", version.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return exitOK
}

func runHelp(c *cli, name string, args []string) int {
	if len(args) == 0 {
		usage(c.stdout)
		return exitOK
	}
	cmd := lookup(args[0])
	if cmd == nil || len(args) > 1 {
		fmt.Fprintf(c.stderr, "aggregator help: unknown command %q\n", args[0])
		usage(c.stderr)
		return exitUsage
	}
	if cmd.name == "help" {
		commandUsage(c.stdout, cmd, nil)
		return exitOK
	}
	return cmd.run(c, cmd.name, []string{"-h"})
}

func (c *cli) printJSON(v any) int { return c.out().PrintJSON(v) }

func timeOrDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// runConfigCheck ("config check") validates a configuration file as serve
// would — the mesh key file and the token files included — and prints
// the effective configuration, defaults filled in, as TOML.
func runConfigCheck(c *cli, name string, args []string) int {
	f := newFlags(name)
	cfgPath := f.String("config", "", "configuration `file` (default "+aggregator.DefaultConfigPath+" if it exists)")
	if code, ok := f.parse(c, args); !ok {
		return code
	}
	if code, ok := f.nArgs(c, 1, "check"); !ok {
		return code
	}
	if f.args[0] != "check" {
		fmt.Fprintf(c.stderr, "aggregator: unknown config subcommand %q (want check)\n", f.args[0])
		return exitUsage
	}
	path := cmdutil.ConfigPath(*cfgPath, aggregator.DefaultConfigPath)
	cfg, err := aggregator.LoadConfig(path)
	if err != nil {
		return c.fail(err)
	}
	if !cfg.Mesh.Insecure {
		if _, err := mesh.LoadKeyring(cfg.Mesh.Keyring); err != nil {
			return c.fail(fmt.Errorf("%s: key \"mesh.keyring\": %w", path, err))
		}
	}
	if _, err := cfg.Mesh.LoadKeys(gwpb.Role_ROLE_AGGREGATOR); err != nil {
		return c.fail(fmt.Errorf("%s: %w", path, err))
	}
	if _, _, err := aggregator.LoadTokens(cfg.HTTP); err != nil {
		return c.fail(fmt.Errorf("%s: %w", path, err))
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(c.stderr, "aggregator: warning: %s: %s\n", path, w)
	}
	return c.out().PrintConfig(path, cfg)
}
