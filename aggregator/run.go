package aggregator

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"

	"github.com/gracewatch/gracewatch/aggregator/httpapi"
	"github.com/gracewatch/gracewatch/aggregator/nodelog"
	"github.com/gracewatch/gracewatch/aggregator/probe"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/hostinfo"
	"github.com/gracewatch/gracewatch/internal/metrics"
	"github.com/gracewatch/gracewatch/internal/version"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// Shutdown budget of Run: leaving the mesh (so that the other aggregators
// take over the actuators at once), then the HTTP requests in flight.
const (
	leaveTimeout    = 3 * time.Second
	shutdownTimeout = 10 * time.Second
)

// RunOptions are what Run needs beyond the configuration.
type RunOptions struct {
	// Logger receives every component's events; nil discards them.
	Logger *slog.Logger
	// ConfigPath is the file cfg came from, for the start line only.
	ConfigPath string
}

// Run is `aggregator serve`: it builds the Service, the HTTP server and the
// mesh from cfg (already validated; cfg.StateDir is created if missing),
// tells systemd it is ready, and serves until ctx ends or the HTTP server
// fails. Then it tells systemd it stops, leaves the mesh, shuts the HTTP
// server down (within shutdownTimeout), stops the Service and the mesh.
// It returns nil after a stop by ctx, else what failed. It blocks.
func Run(ctx context.Context, cfg Config, o RunOptions) error {
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	log := logger.With("component", "main")

	token, readToken, err := cfg.HTTP.LoadTokens()
	if err != nil {
		return err
	}
	for _, w := range cfg.Warnings() {
		log.Warn(w)
	}
	reg := metrics.NewRegistry(metrics.ProgramAggregator)
	stateDir := cfg.StateDir
	if stateDir != "" {
		if err := os.MkdirAll(stateDir, 0o750); err != nil {
			return fmt.Errorf("state_dir: %w", err)
		}
	}
	// Ask before accuse (package aggregator/probe): a node is asked directly before it is
	// served down by the central deadline or unreachable on memberlist's
	// word.
	policy := cfg.ViewPolicy()
	policy.ProbeWait, policy.ReachedFor = probe.WaitFor(policy.ClockSkewAllowance), probe.DefaultReachedFor
	svc, err := New(Options{
		Registry:     reg,
		Name:         cfg.Name,
		Policy:       policy,
		Grace:        cfg.Policy.Grace.D(),
		Actuators:    cfg.Actuators,
		Reservations: cfg.Reservations,
		Incidents:    cfg.Incidents,
		StateDir:     stateDir,
		// The grace advisor's history (docs/DESIGN.md §5d).
		TeardownHistory: cfg.History.Options(stateDir),
		MeshInsecure:    cfg.Mesh.Insecure,
		ProvenOnly:      !cfg.Mesh.AcceptsUnsigned(gwpb.Role_ROLE_AGGREGATOR),
		Logger:          logger,
		// The machine's facts through gopsutil, for /readyz and the
		// state dir metrics; a statfs that hangs costs /readyz 1 s.
		Host: hostinfo.NewReader(hostinfo.Options{StateDir: stateDir, Timeout: time.Second}).Read,
	})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		return fmt.Errorf("http.listen: %w", err)
	}
	if len(token)+len(readToken) > 0 && cfg.HTTP.TLSCert == "" && !isLoopback(l.Addr()) {
		log.Warn("the tokens travel in clear text: set http.tls_cert and http.tls_key", "listen", l.Addr().String())
	}
	srv := httpapi.NewServer(edge{svc}, httpapi.ServerOptions{Token: token, ReadToken: readToken, GuardReads: cfg.HTTP.ReadToken, MaxWatchers: cfg.HTTP.MaxWatchers,
		MaxConnsPerSource: cfg.HTTP.MaxConnsPerSource, Logger: logger, Registry: reg})
	serveErr := make(chan error, 1)
	go func() {
		if cfg.HTTP.TLSCert != "" {
			serveErr <- srv.ServeTLS(l, cfg.HTTP.TLSCert, cfg.HTTP.TLSKey)
		} else {
			serveErr <- srv.Serve(l)
		}
	}()
	log.Info("starting", "version", version.Version, "config", o.ConfigPath, "name", cfg.Name, "mode", cfg.Mode, "listen", l.Addr().String(), "pid", os.Getpid())

	// New makes its first join attempt before it returns; /healthz already
	// answers, /readyz says why it is not ready.
	m, err := mesh.New(mesh.Options{Name: cfg.Name, Role: gwpb.Role_ROLE_AGGREGATOR, Config: cfg.Mesh, Handler: svc, Logger: logger, Registry: reg})
	if err != nil {
		shutdownServer(srv, log)
		return fmt.Errorf("mesh: %w", err)
	}
	runCtx, cancelRun := context.WithCancel(context.Background())
	defer cancelRun()
	runDone := make(chan error, 1)
	go func() { runDone <- svc.Run(runCtx, m) }()
	if _, err := daemon.SdNotify(false, daemon.SdNotifyReady); err != nil {
		log.Warn("sd_notify", "err", err)
	}
	if interval, err := daemon.SdWatchdogEnabled(false); err == nil && interval > 0 {
		go watchdog(runCtx, svc, interval/2, log)
	}
	log.Info("aggregator ready", "mesh", m.Addr(), "joined", m.Joined())

	var failure error
	served := false
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		served = true
		failure = fmt.Errorf("http: %w", err)
	}
	daemon.SdNotify(false, daemon.SdNotifyStopping)
	log.Info("stopping")
	if err := m.Leave(leaveTimeout); err != nil {
		log.Warn("leaving the mesh", "err", err)
	}
	shutdownServer(srv, log)
	cancelRun()
	<-runDone
	if err := m.Shutdown(); err != nil {
		log.Warn("mesh shutdown", "err", err)
	}
	if !served {
		if err := <-serveErr; err != nil {
			failure = fmt.Errorf("http: %w", err)
		}
	}
	if failure != nil {
		log.Error("aggregator failed", "err", failure)
		return failure
	}
	log.Info("stopped")
	return nil
}

func shutdownServer(srv *httpapi.Server, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		log.Warn("http shutdown", "err", err)
	}
}

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// watchdog pings systemd's watchdog through the service's main loop (Sync)
// every period, so a stuck loop stops the pings and systemd restarts the
// aggregator; each ping also refreshes the STATUS line.
func watchdog(ctx context.Context, svc *Service, period time.Duration, log *slog.Logger) {
	t := time.NewTicker(period)
	defer t.Stop()
	last := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sctx, cancel := context.WithTimeout(ctx, period)
		err := svc.Sync(sctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				log.Error("main loop did not answer the watchdog", "err", err)
			}
			continue
		}
		counts := map[view.State]int{}
		nodes := svc.Nodes()
		for _, n := range nodes {
			counts[n.State]++
		}
		line := fmt.Sprintf("STATUS=%d nodes: %d up, %d teardown, %d down, %d unreachable", len(nodes),
			counts[view.StateUp], counts[view.StateTeardown], counts[view.StateDown], counts[view.StateUnreachable])
		msg := daemon.SdNotifyWatchdog
		if line != last {
			msg += "\n" + line
			last = line
		}
		daemon.SdNotify(false, msg)
	}
}

// nodeLine writes a line about node to the Service's log within node's
// budget (nodeLog.emit).
func (s *Service) nodeLine(level slog.Level, node, msg string, args ...any) {
	s.lines.Write(s.log, level, node, msg, nodelog.CallerPC(), args)
}
