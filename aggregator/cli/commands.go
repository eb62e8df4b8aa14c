package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/gracewatch/gracewatch/aggregator"
	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/httpapi"
	"github.com/gracewatch/gracewatch/internal/cmdutil"
	"github.com/gracewatch/gracewatch/internal/config"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

func runServe(c *cli, name string, args []string) int {
	f := c.newFlags(name)
	cfgPath := f.String("config", "", "configuration `file` (default "+aggregator.DefaultConfigPath+" if it exists)")
	listen := f.String("listen", "", "HTTP `address` (overrides http.listen)")
	if code, ok := f.ParseN(args, 0, ""); !ok {
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
	f := c.newFlags(name)
	state := f.String("state", "", "only nodes in this `state`: up, teardown, down or unreachable")
	hostlist := f.Bool("hostlist", false, "print a compressed hostlist, e.g. node[3,17-19]")
	asJSON := f.Bool("json", false, "print the nodes as JSON")
	if code, ok := f.ParseN(args, 0, ""); !ok {
		return code
	}
	var st api.State
	if *state != "" {
		var err error
		if st, err = api.ParseState(*state); err != nil {
			return f.UsageErrorf("--state: %v", err)
		}
	}
	if *hostlist && *asJSON {
		return f.UsageErrorf("give one of --hostlist and --json, not both")
	}
	if *hostlist {
		return call(c, f, false, false, func(ctx context.Context, cl *api.Client) (string, error) { return cl.Hostlist(ctx, st) },
			func(w io.Writer, hl string) { fmt.Fprintln(w, hl) })
	}
	return call(c, f, false, *asJSON, func(ctx context.Context, cl *api.Client) (api.NodeList, error) {
		nodes, err := cl.Nodes(ctx, st)
		return api.NodeList{Nodes: nodes}, err
	}, writeNodes)
}

// writeNodes prints nodes as a table for people.
func writeNodes(w io.Writer, list api.NodeList) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tSCHEDULABLE\tSINCE\tFREE_AT\tREASON")
	for _, n := range list.Nodes {
		sched := "no"
		switch {
		case n.State == api.StateTeardown && n.Schedulable:
			sched = "from free_at"
		case n.Schedulable:
			sched = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, n.State, sched, timeOrDash(n.Since), timeOrDash(n.FreeAt), orDash(n.Reason))
	}
	tw.Flush()
	writeWouldDrain(w, list.Nodes)
}

// writeWouldDrain prints, below the nodes, the drains that observe mode let
// pass (docs/DESIGN.md §5c): when each node would have been drained, the
// jobs, what their processes wait on and the diagnosis. Nothing when none.
func writeWouldDrain(w io.Writer, nodes []api.Node) {
	first := true
	for _, n := range nodes {
		wd := n.WouldDrain
		if wd == nil {
			continue
		}
		if first {
			fmt.Fprintln(w, "\nwould drain (observe mode: nothing was drained):")
			first = false
		}
		cause := wd.Wchan
		if wd.Mountpoint != "" {
			cause = strings.TrimSpace(wd.FSType + " " + wd.Source + " on " + wd.Mountpoint)
		}
		fmt.Fprintf(w, "  %s at %s, jobs %s, waiting on %s: %s\n", n.Name, timeOrDash(wd.At), orDash(strings.Join(wd.Jobs, ",")),
			orDash(cause), orDash(wd.Reason))
	}
}

func runReservations(c *cli, name string, args []string) int {
	return runShow(c, name, args, "the reservations", func(ctx context.Context, cl *api.Client) (api.ReservationList, error) {
		return cl.Reservations(ctx)
	}, writeReservations)
}

// writeReservations prints the reservations as a table for people.
func writeReservations(w io.Writer, rl api.ReservationList) {
	switch {
	case !rl.Enabled:
		fmt.Fprintln(w, "reservations are off ([reservations] command is empty)")
		return
	case !rl.Leader:
		fmt.Fprintln(w, "this aggregator does not lead: the leader (aggregator healthz) keeps the reservations")
		return
	}
	if rl.Error != "" {
		fmt.Fprintf(w, "failing since %s: %s\n", timeOrDash(rl.ErrorAt), rl.Error)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tNODES\tCOUNT\tEND")
	for _, r := range rl.Reservations {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", r.Name, r.Nodes, r.Count, r.End.UTC().Format(time.RFC3339))
	}
	tw.Flush()
}

// call is a client command's call of the aggregator: on a client of its
// HTTP API (see client; needToken for an admin command), call runs fn and
// prints the result as JSON with --json (asJSON), else with text.
func call[T any](c *cli, f *flags, needToken, asJSON bool, fn func(context.Context, *api.Client) (T, error), text func(io.Writer, T)) int {
	cl, err := c.client(f, needToken)
	if err != nil {
		return c.fail(err)
	}
	return cmdutil.Call(c.out(), asJSON, func(ctx context.Context) (T, error) { return fn(ctx, cl) }, text)
}

// runShow runs a command that takes no argument and no flag but --json
// (and the connection's): it prints what get answers, as JSON or with
// text. what names it in the help of --json ("the incidents").
func runShow[T any](c *cli, name string, args []string, what string, get func(context.Context, *api.Client) (T, error), text func(io.Writer, T)) int {
	f := c.newFlags(name)
	asJSON := f.Bool("json", false, "print "+what+" as JSON")
	if code, ok := f.ParseN(args, 0, ""); !ok {
		return code
	}
	return call(c, f, false, *asJSON, get, text)
}

func runAction(c *cli, name string, args []string) int {
	f := c.newFlags(name)
	reason := f.String("reason", "", "why (required, logged; a drain's reason becomes the node's)")
	asJSON := f.Bool("json", false, "print the node as JSON")
	f.Required = []string{"reason"}
	if code, ok := f.ParseN(args, 1, "NODE"); !ok {
		return code
	}
	if len(*reason) > httpapi.MaxReasonBytes {
		return f.UsageErrorf("--reason: %d bytes, longer than %d", len(*reason), httpapi.MaxReasonBytes)
	}
	node := f.Args()[0]
	if name == "forget" {
		return call(c, f, true, *asJSON, func(ctx context.Context, cl *api.Client) (api.Forgotten, error) {
			return api.Forgotten{Name: node}, cl.Forget(ctx, node, *reason)
		}, func(w io.Writer, g api.Forgotten) { fmt.Fprintf(w, "%s forgotten\n", g.Name) })
	}
	action := map[string]func(*api.Client, context.Context, string, string) (api.Node, error){
		"resume": (*api.Client).Resume, "drain": (*api.Client).Drain}[name]
	verb := map[string]string{"resume": "resumed", "drain": "drained"}[name]
	return call(c, f, true, *asJSON, func(ctx context.Context, cl *api.Client) (api.Node, error) {
		return action(cl, ctx, node, *reason)
	}, func(w io.Writer, n api.Node) {
		fmt.Fprintf(w, "%s %s: state %s", n.Name, verb, n.State)
		if n.Reason != "" {
			fmt.Fprintf(w, " (%s)", n.Reason)
		}
		fmt.Fprintln(w)
	})
}

// client resolves the URL (--url, else $GRACEWATCH_AGGREGATOR, else the
// default) and the token (--token-file, else a token file of the default
// configuration file: http.admin_token_file, and for a read command, which
// a read token serves too, http.read_token_file when the admin one cannot
// be read). needToken (an admin command) makes an admin token file that
// cannot be read an error; without it the request goes without a token.
func (c *cli) client(f *flags, needToken bool) (*api.Client, error) {
	url := *f.url
	if url == "" {
		url = c.getenv(api.URLEnv)
	}
	if url == "" {
		url = api.DefaultURL
	}
	var token []byte
	switch {
	case *f.tokenFile != "":
		t, err := httpapi.LoadToken(*f.tokenFile)
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
			t, err := httpapi.LoadToken(h.AdminTokenFile)
			if err != nil && needToken {
				return nil, fmt.Errorf("%w (http.admin_token_file of %s; give --token-file)", err, aggregator.DefaultConfigPath)
			}
			token = t
		}
		if token == nil && !needToken && h.ReadTokenFile != "" {
			token, _ = httpapi.LoadToken(h.ReadTokenFile)
		}
	}
	return api.NewClient(url, string(token))
}

// defaultHTTPConfig returns the [http] table of the default configuration
// file, if it exists and decodes.
func defaultHTTPConfig() (httpapi.Config, bool) {
	cfg := aggregator.DefaultConfig()
	if err := config.Load(aggregator.DefaultConfigPath, &cfg); err != nil {
		return cfg.HTTP, false
	}
	return cfg.HTTP, true
}

// runKeygen writes a new key file: a mesh key (keygen) or a site key
// (site-key, the aggregators' secret; mesh/keys.go has the scheme), made
// the same way, for different holders.
func runKeygen(c *cli, name string, args []string) int {
	f := c.newFlags(name)
	if code, ok := f.ParseN(args, 1, "FILE"); !ok {
		return code
	}
	if err := mesh.WriteKeyFile(f.Args()[0]); err != nil {
		return c.fail(err)
	}
	if name == "site-key" {
		fmt.Fprintf(c.stdout, "wrote a new site key to %s (mode 0600); copy it to every aggregator only, set mesh.site_key_file, "+
			"then give each node its `aggregator node-key NODE` and every node `aggregator public-key`\n", f.Args()[0])
		return exitOK
	}
	fmt.Fprintf(c.stdout, "wrote a new mesh key to %s (mode 0600); copy it to every node and aggregator, and set mesh.keyring\n", f.Args()[0])
	return exitOK
}

func runVersion(c *cli, name string, args []string) int {
	f := c.newFlags(name)
	if code, ok := f.ParseN(args, 0, ""); !ok {
		return code
	}
	return c.out().PrintVersion()
}

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
	f := c.newFlags(name)
	cfgPath := f.String("config", "", "configuration `file` (default "+aggregator.DefaultConfigPath+" if it exists)")
	if code, ok := f.ParseN(args, 1, "check"); !ok {
		return code
	}
	if f.Args()[0] != "check" {
		fmt.Fprintf(c.stderr, "aggregator: unknown config subcommand %q (want check)\n", f.Args()[0])
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
	if _, _, err := cfg.HTTP.LoadTokens(); err != nil {
		return c.fail(fmt.Errorf("%s: %w", path, err))
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(c.stderr, "aggregator: warning: %s: %s\n", path, w)
	}
	return c.out().PrintConfig(path, cfg)
}
