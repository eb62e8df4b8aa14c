// Package agent wires the node agent together: the cgroup manager, the
// diagnostics, the teardown supervisor and the local API.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/coreos/go-systemd/v22/journal"
	"github.com/prometheus/client_golang/prometheus"

	apiserver "github.com/gracewatch/gracewatch/agent/api/server"
	"github.com/gracewatch/gracewatch/agent/cgroup"
	"github.com/gracewatch/gracewatch/agent/diagnose"
	"github.com/gracewatch/gracewatch/agent/execsys"
	"github.com/gracewatch/gracewatch/agent/meshlink"
	"github.com/gracewatch/gracewatch/agent/procfs"
	"github.com/gracewatch/gracewatch/agent/teardown"
	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/config"
	"github.com/gracewatch/gracewatch/internal/hostinfo"
	"github.com/gracewatch/gracewatch/internal/metrics"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// shutdownTimeout bounds the graceful stop of the API server.
const shutdownTimeout = 5 * time.Second

// cgroups adapts cgroup.Manager to teardown.Cgroups, with the allow-list
// of foreign cgroups ([teardown] foreign_cgroups).
type cgroups struct {
	*cgroup.Manager
	allow cgroup.AllowList
}

func (cgroups) Populated(path string) (bool, error) { return cgroup.Populated(path) }

// Resolve resolves a foreign cgroup that the allow-list admits.
func (c cgroups) Resolve(spec string) (teardown.Foreign, error) {
	f, err := c.ResolveAllowed(spec, c.allow)
	if err != nil {
		return teardown.Foreign{}, err
	}
	return teardown.Foreign{Path: f.Path, V1: f.V1(), Name: f.String()}, nil
}

// Procs lists a foreign cgroup's processes: v1 through the Manager's FS.
func (c cgroups) Procs(path string, v1 bool, max int) ([]int, error) {
	if v1 {
		return c.ProcsV1(path, max)
	}
	pids, err := cgroup.Procs(path)
	if max > 0 && len(pids) > max {
		pids = pids[:max]
	}
	return pids, err
}

var _ teardown.Cgroups = cgroups{}

var _ teardown.Expirations = (*execsys.ExpirationCommand)(nil)

// Agent is a running node agent.
type Agent struct {
	cfg  Config
	log  *slog.Logger
	cg   *cgroup.Manager
	sup  *teardown.Supervisor
	srv  *apiserver.Server
	proc *procfs.Reader
	link *meshlink.Link
	reg  *prometheus.Registry
}

// Preflight checks what cfg names outside itself, which New would
// otherwise find wrong only after it created the cgroup subtree and the
// state dir: the mesh's key file and the socket's group. The errors are
// config.KeyErrors (config.InFile places them in the file). It changes
// nothing.
func Preflight(cfg Config) error {
	var errs []error
	if cfg.Mesh.Enabled && !cfg.Mesh.Insecure {
		if _, err := mesh.LoadKeyring(cfg.Mesh.Keyring); err != nil {
			errs = append(errs, config.KeyErr("mesh.keyring", "%v", err))
		}
	}
	if cfg.Mesh.Enabled {
		if _, err := cfg.Mesh.LoadKeys(gwpb.Role_ROLE_AGENT); err != nil {
			errs = append(errs, err) // names its key: "mesh.node_key_file: ..."
		}
	}
	if g := cfg.API.SocketGroup; g != "" {
		if err := apiserver.CheckSocketGroup(g); err != nil {
			errs = append(errs, config.KeyErr("api.socket_group", "%v", err))
		}
	}
	return errors.Join(errs...)
}

// New builds the agent from cfg: it checks it (Preflight), then sets up
// the cgroup subtree, loads the persisted state and opens the socket.
// Nothing runs until Run.
func New(cfg Config, logger *slog.Logger) (*Agent, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := Preflight(cfg); err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, log: logger.With("component", "agent")}
	var link *meshlink.Link
	onChange := notifyStatus
	onReport := journalReport
	if cfg.Mesh.Enabled {
		// The link comes first: the supervisor below is built with its
		// callbacks, the mesh (in Run) with it as its Handler, and its Run
		// is given both.
		link = meshlink.New(logger, notifyStatusNote)
		a.link = link
		onChange = func(st teardown.Status) { notifyStatusNote(st, link.StatusNote()); link.OnChange(st) }
		onReport = func(r *diagnose.Report) { journalReport(r); link.OnReport(r) }
	}
	cg, err := cgroup.New(cgroup.Options{
		Mount:    cfg.Cgroup.Mount,
		Root:     cfg.Cgroup.Root,
		ProcRoot: cfg.Diagnostics.ProcRoot,
		Logger:   logger,
	})
	if err != nil {
		return nil, fmt.Errorf("cgroup setup: %w", err)
	}
	a.cg = cg
	ok := false
	defer func() {
		if !ok {
			cg.Close()
		}
	}()
	a.proc = procfs.NewReader(cfg.Diagnostics.ProcRoot, cfg.Diagnostics.ReadTimeout.D(), cfg.Diagnostics.MaxBlockedReads)
	// The node's load, memory, uptime and state dir space, through
	// gopsutil, for the reports and the metrics.
	host := hostinfo.NewReader(hostinfo.Options{ProcRoot: cfg.Diagnostics.ProcRoot, StateDir: cfg.StateDir,
		Timeout: cfg.Diagnostics.ReadTimeout.D()})
	snap := diagnose.NewSnapshotter(diagnose.Options{
		Host:           diagnoseHost(host),
		Proc:           a.proc,
		SampleInterval: cfg.Diagnostics.SampleInterval.D(),
		Clock:          clock.Real{},
		Logger:         logger,
		Node:           cfg.NodeName,
	})
	store, err := diagnose.NewStore(filepath.Join(cfg.StateDir, "reports"), cfg.Diagnostics.MaxReports)
	if err != nil {
		return nil, err
	}
	// The metrics follow the supervisor's hooks; they are served only with
	// [metrics] listen.
	a.reg = metrics.NewRegistry(metrics.ProgramNodeagent)
	am := newAgentMetrics(a.reg, a.proc, cfg.Diagnostics.MaxBlockedReads, host.Read)
	notify := onChange
	onChange = func(st teardown.Status) { notify(st); am.onChange(st) }
	allow, err := cgroup.ParseAllowList(cfg.Teardown.ForeignCgroups)
	if err != nil {
		return nil, fmt.Errorf("teardown.foreign_cgroups: %w", err)
	}
	var exps teardown.Expirations
	if len(cfg.Teardown.ExpirationCommand) > 0 {
		exps = execsys.NewExpirationCommand(cfg.Teardown.ExpirationCommand, cfg.Teardown.ExpirationTimeout.D())
	}
	sup, err := teardown.New(teardown.Options{
		Node:             cfg.NodeName,
		StateDir:         cfg.StateDir,
		Clock:            clock.Real{},
		Cgroups:          cgroups{cg, allow},
		Expirations:      exps,
		Diagnoser:        snap,
		Reports:          store,
		Logger:           logger,
		Grace:            cfg.Teardown.Grace.D(),
		KillWait:         cfg.Teardown.KillWait.D(),
		UnkillableAfter:  cfg.Teardown.UnkillableAfter.D(),
		AutoResume:       cfg.Teardown.AutoResume,
		SignalForeign:    cfg.Teardown.SignalForeign,
		Observe:          cfg.Mode == config.ModeObserve,
		MaxExpirationAge: cfg.Teardown.MaxExpirationAge.D(),
		OutputTail:       cfg.Teardown.OutputTail.N(),
		OnReport:         onReport,
		OnChange:         onChange,
		OnEvent:          am.onEvent,
	})
	if err != nil {
		return nil, err
	}
	a.sup = sup
	a.srv = apiserver.NewServer(socketService{sup}, apiserver.ServerOptions{
		AllowedUIDs: cfg.API.AllowedUIDs,
		AllowedGIDs: cfg.API.AllowedGIDs,
		ProcRoot:    cfg.Diagnostics.ProcRoot,
		Logger:      logger,
	})
	ok = true
	return a, nil
}

// Run serves until ctx ends, then waits up to [api] stop_wait for the
// attached epilog streams (see drain) and stops the API and the
// supervisor. Running epilogues are left running; a restarted agent
// re-adopts them.
func (a *Agent) Run(ctx context.Context) error {
	defer a.cg.Close()
	l, err := apiserver.Listen(a.cfg.Socket, a.cfg.API.SocketGroup)
	if err != nil {
		return err
	}
	var ml net.Listener
	var msrv *http.Server
	if a.cfg.Metrics.Listen != "" {
		if ml, err = net.Listen("tcp", a.cfg.Metrics.Listen); err != nil {
			l.Close()
			return fmt.Errorf("metrics.listen: %w", err)
		}
		msrv = a.metricsServer()
	}
	// The supervisor, the mesh link and the watchdog run on ctx, which ends
	// after the drain, not when the caller's does (see drain).
	stop := ctx
	ctx, cancel := context.WithCancel(context.WithoutCancel(stop))
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 3)
	wg.Add(2)
	go func() {
		defer wg.Done()
		errc <- a.sup.Run(ctx)
	}()
	go func() {
		defer wg.Done()
		if err := a.srv.Serve(l); err != nil {
			errc <- fmt.Errorf("api: %w", err)
		}
	}()
	if msrv != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := msrv.Serve(ml); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("metrics: %w", err)
			}
		}()
	}
	var m *mesh.Mesh
	if a.link != nil {
		st, err := a.sup.Status(ctx)
		if err != nil {
			cancel()
			if msrv != nil {
				msrv.Close()
			}
			wg.Wait()
			return err
		}
		m, err = mesh.New(mesh.Options{Name: a.cfg.NodeName, Role: gwpb.Role_ROLE_AGENT, Config: a.cfg.Mesh.Config,
			Meta: meshlink.MetaOf(st), Handler: a.link, Logger: a.log, Registry: a.reg})
		if err != nil {
			cancel()
			a.srv.Shutdown(context.Background())
			if msrv != nil {
				msrv.Close()
			}
			wg.Wait()
			return fmt.Errorf("mesh: %w", err)
		}
		a.link.OnChange(st)
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.link.Run(ctx, a.sup, m)
		}()
	}
	if interval, err := daemon.SdWatchdogEnabled(false); err == nil && interval > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.watchdog(ctx, interval/2)
		}()
	}
	// Outside systemd (no NOTIFY_SOCKET) this does nothing.
	if _, err := daemon.SdNotify(false, daemon.SdNotifyReady); err != nil {
		a.log.Warn("sd_notify", "err", err)
	}
	attrs := []any{"socket", a.cfg.Socket, "cgroup_root", a.cg.Root(),
		"state_dir", a.cfg.StateDir, "mode", a.cfg.Mode, "pid", os.Getpid()}
	if ml != nil {
		attrs = append(attrs, "metrics", ml.Addr().String())
	}
	a.log.Info("node agent ready", attrs...)
	var runErr error
	stopped := false
	select {
	case <-stop.Done():
		stopped = true
	case runErr = <-errc:
	}
	// STOPPING, and how long the stop may take: stop_wait may be longer
	// than the unit's TimeoutStopSec, after which systemd would kill the
	// agent before it left the mesh.
	daemon.SdNotify(false, stoppingNotice(a.cfg.API.StopWait.D(), stopped))
	if stopped {
		a.drain()
	}
	cancel()
	sctx, scancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer scancel()
	if err := a.srv.Shutdown(sctx); err != nil && !errors.Is(err, context.Canceled) {
		a.log.Warn("api shutdown", "err", err)
	}
	if msrv != nil {
		if err := msrv.Shutdown(sctx); err != nil {
			a.log.Warn("metrics shutdown", "err", err)
			msrv.Close()
		}
	}
	wg.Wait()
	if m != nil {
		if err := m.Leave(meshLeaveTimeout); err != nil {
			a.log.Warn("mesh leave", "err", err)
		}
		m.Shutdown()
	}
	a.log.Info("node agent stopped")
	return runErr
}

// drain waits, at most [api] stop_wait, for the epilog streams in progress
// to end while the supervisor and the mesh still run, so that an epilogue
// that ends meanwhile reports its exit status to its caller (a restart for
// a package upgrade then never fails an exec system's epilog). New
// connections find no socket: `nodeagent epilog` waits for the next agent.
func (a *Agent) drain() {
	wait := a.cfg.API.StopWait.D()
	if wait <= 0 {
		return
	}
	daemon.SdNotify(false, "STATUS=stopping: waiting up to "+wait.String()+" for epilog streams")
	a.log.Info("stopping: waiting for the epilog streams in progress", "stop_wait", wait)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	start := time.Now()
	if err := a.srv.Drain(ctx); err != nil {
		a.log.Warn("epilog streams still running after stop_wait: they end now; the epilogues go on and the next agent re-adopts them",
			"stop_wait", wait)
		return
	}
	a.log.Info("epilog streams ended", "after", time.Since(start).Round(time.Millisecond))
}

// meshLeaveTimeout bounds the mesh's leave at the end of Run.
const meshLeaveTimeout = 2 * time.Second

// stopSlack is added to the longest stop when systemd is told of it.
const stopSlack = 5 * time.Second

// stoppingNotice is the sd_notify message at the start of a stop: STOPPING,
// and EXTEND_TIMEOUT_USEC with the longest the stop may take (the drain of
// the epilog streams when draining, the API's shutdown, the mesh's leave,
// and some slack), so that systemd's stop timeout (TimeoutStopSec) never
// ends the agent within it, whatever [api] stop_wait says.
func stoppingNotice(stopWait time.Duration, draining bool) string {
	d := shutdownTimeout + meshLeaveTimeout + stopSlack
	if draining {
		d += stopWait
	}
	return fmt.Sprintf("%s\nEXTEND_TIMEOUT_USEC=%d", daemon.SdNotifyStopping, d.Microseconds())
}

// Run builds an agent from cfg and runs it until ctx ends.
func Run(ctx context.Context, cfg Config, logger *slog.Logger) error {
	a, err := New(cfg, logger)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// diagnoseHost gives the reports the node's facts read by r. The two types
// have the same fields (diagnose keeps its own: the client links it and must
// not link gopsutil), so one converts to the other.
func diagnoseHost(r *hostinfo.Reader) diagnose.HostFunc {
	return func(ctx context.Context) diagnose.HostFacts { return diagnose.HostFacts(r.Read(ctx)) }
}

// metricsServer returns the HTTP server of GET /metrics ([metrics] listen).
func (a *Agent) metricsServer() *http.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics.Handler(a.reg, a.log))
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
	}
}

// journalReport sends a report's summary to the journal with fields an
// administrator can filter on (journalctl HUNG_PID=5814), when the journal
// is there. It runs on the supervisor's loop: journal.Send is one datagram.
func journalReport(r *diagnose.Report) {
	if !journal.Enabled() {
		return
	}
	vars := map[string]string{"JOB_ID": r.Job, "STAGE": r.Stage, "OUTCOME": r.Outcome}
	if len(r.Cgroups) > 0 {
		vars["CGROUP"] = r.Cgroups[0].Path
	}
	if len(r.Processes) > 0 {
		vars["HUNG_PID"] = fmt.Sprint(r.Processes[0].PID)
		vars["CLASS"] = string(r.Processes[0].Class)
	}
	journal.Send(r.Summary, journal.PriWarning, vars)
}

// watchdog pings systemd's watchdog through the supervisor's main loop
// every period: a loop that is stuck stops the pings, and systemd restarts
// the agent (the epilogues survive: KillMode=process).
func (a *Agent) watchdog(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			pctx, cancel := context.WithTimeout(ctx, period)
			_, err := a.sup.Status(pctx)
			cancel()
			if err == nil {
				daemon.SdNotify(false, daemon.SdNotifyWatchdog)
			} else if ctx.Err() == nil {
				a.log.Error("main loop did not answer the watchdog", "err", err)
			}
		}
	}
}

// notifyStatus tells systemd what the agent is doing ("2 teardowns, node
// down: ..."); outside systemd it does nothing.
func notifyStatus(st teardown.Status) { notifyStatusNote(st, "") }

// notifyStatusNote is notifyStatus with a note of the mesh link's (the
// aggregators gossip lost) at the end of the line.
func notifyStatusNote(st teardown.Status, note string) {
	active := 0
	for _, j := range st.Jobs {
		if j.Phase == teardown.PhaseTeardown || j.Phase == teardown.PhaseOverdue {
			active++
		}
	}
	line := fmt.Sprintf("%d teardowns, node %s", active, st.State)
	if st.StateFile != nil {
		line = "STATE FILE NOT WRITTEN (" + st.StateFile.Error + "); " + line
	}
	if st.Reason != "" {
		line += ": " + st.Reason
	}
	if note != "" {
		line += "; " + note
	}
	if len(line) > 200 {
		line = line[:197] + "..."
	}
	daemon.SdNotify(false, "STATUS="+line)
}
