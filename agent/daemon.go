package agent

// What the daemon binary (cmd/nodeagentd) runs for the two commands only it
// can: serve and config check (agent/cli.Daemon).

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/gracewatch/gracewatch/agent/cli"
	"github.com/gracewatch/gracewatch/agent/execsys"
	"github.com/gracewatch/gracewatch/internal/cmdutil"
	"github.com/gracewatch/gracewatch/internal/config"
	"github.com/gracewatch/gracewatch/internal/version"
)

// Daemon returns the daemon's side of the command line: serve runs the
// agent until SIGINT or SIGTERM, config check validates a configuration as
// serve would and prints the effective one.
func Daemon() *cli.Daemon { return &cli.Daemon{Serve: serve, ConfigCheck: configCheck} }

// serve runs the agent with the configuration and the flags' overrides.
func serve(o cli.ServeOptions, out cmdutil.Out) int {
	cfg, err := LoadConfig(o.Config)
	if err != nil {
		return out.Fail(err)
	}
	if o.Socket != "" {
		cfg.Socket = o.Socket
	}
	if o.StateDir != "" {
		cfg.StateDir = o.StateDir
	}
	if o.CgroupRoot != "" {
		cfg.Cgroup.Root = o.CgroupRoot
	}
	if o.Node != "" {
		cfg.NodeName = o.Node
	}
	if err := cfg.Validate(); err != nil {
		return out.Fail(fmt.Errorf("configuration with flags: %w", err))
	}
	// Everything is checked before anything is created (the cgroup
	// subtree, the state dir).
	if err := Preflight(cfg); err != nil {
		return out.Fail(inFile(o.Config, err))
	}
	logger := cmdutil.NewLogger(out.Stderr, cfg.LogFormat, cfg.LogLevel).With("node", cfg.NodeName)
	log := logger.With("component", "main")

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		// After the first signal, a second one kills at once.
		<-ctx.Done()
		stop()
	}()
	log.Info("starting", "version", version.Version, "config", o.Config, "pid", os.Getpid())
	if err := Run(ctx, cfg, logger); err != nil {
		log.Error("agent failed", "err", err)
		return out.Fail(err)
	}
	log.Info("stopped")
	return cmdutil.ExitOK
}

// configCheck validates a configuration file as serve would (including the
// mesh key file's permissions) and prints the effective configuration,
// defaults filled in, as TOML.
func configCheck(path string, out cmdutil.Out) int {
	cfg, err := LoadConfig(path)
	if err != nil {
		return out.Fail(err)
	}
	if err := Preflight(cfg); err != nil {
		return out.Fail(inFile(path, err))
	}
	code := out.PrintConfig(path, cfg)
	// The grace against the exec systems found here: advice on standard
	// error, never a failure (the check runs where the agent runs, and an
	// exec system may be down at the time).
	checks, errs := execsys.CheckAll(context.Background())
	for _, c := range checks {
		fmt.Fprintf(out.Stderr, "nodeagent: %s kill path: %s; smallest safe grace %v\n", c.System, c.Path, c.MinGrace)
		for _, w := range c.Warnings(cfg.Teardown.Grace.D()) {
			fmt.Fprintf(out.Stderr, "nodeagent: warning: %s\n", w)
		}
	}
	for _, err := range errs {
		fmt.Fprintf(out.Stderr, "nodeagent: cannot compare the grace with the exec system: %v\n", err)
	}
	return code
}

// inFile places the errors of agent.Preflight at their lines of the
// configuration file at path (empty: the defaults).
func inFile(path string, err error) error {
	var data []byte
	if path != "" {
		data, _ = os.ReadFile(path)
	}
	return config.InFile(path, data, err)
}
