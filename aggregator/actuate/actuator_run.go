package actuate

import (
	"context"
	"log/slog"
	"strings"
	"time"
	"unicode"

	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/nodename"
	"github.com/gracewatch/gracewatch/internal/runcmd"
)

// How one actuator command runs: its argv expanded for the node, no shell,
// retried with back-off while this aggregator leads, at most
// maxConcurrentRuns at once.

// runWithRetries runs one actuator, retrying with back-off; it gives up
// early when leadership is lost or the aggregator stops.
func (a *Actuators) runWithRetries(ctx context.Context, node, on, reason string, index int, c Config) bool {
	if err := nodename.Validate(node); err != nil {
		a.log.Error("actuator not run: invalid node name", "node", nodename.Quote(node), "transition", on, "err", err)
		return false
	}
	argv := ExpandArgv(c.Command, node, reason)
	return a.runRetrying(ctx, c, on, argv, func(ctx context.Context) (int, string, error) {
		return RunCommand(ctx, argv, c.Timeout.D(), node, on, reason)
	}, a.log.With("node", node, "transition", on, "actuator", index), node)
}

// runRetrying runs actuator c's command argv for transition on (run runs
// it once), retrying with back-off, at most maxConcurrentRuns at once; it
// gives up early when leadership is lost or the aggregator stops. log
// names the run; its lines take from node's budget (a.lines), none for a
// batch (node ""), whose runs BatchDelay spaces.
func (a *Actuators) runRetrying(ctx context.Context, c Config, on string, argv []string,
	run func(context.Context) (int, string, error), log *slog.Logger, node string) bool {
	lines := a.Lines
	if node == "" {
		lines = nil
	}
	retries := DefaultActuatorRetries
	if c.Retries != nil {
		retries = *c.Retries
	}
	delay := a.backoff
	for attempt := 1; attempt <= retries+1; attempt++ {
		if !a.acquire(ctx) {
			break
		}
		start := time.Now()
		exit, out, err := run(ctx)
		a.release()
		if a.OnRun != nil {
			a.OnRun(on, err)
		}
		log := log.With("attempt", attempt, "exit", exit, "duration", time.Since(start).Round(time.Millisecond))
		if err == nil {
			lines.Emit(log, slog.LevelInfo, node, "actuator ran", "argv", argv)
			return true
		}
		lines.Emit(log, slog.LevelWarn, node, "actuator failed", "argv", argv, "err", err, "output", out)
		if attempt > retries || !a.StillLeading() || !sleep(ctx, a.clock, delay) {
			break
		}
		delay = min(delay*2, MaxBackoff)
	}
	return false
}

// StillLeading reports whether this aggregator leads and has not stopped.
func (a *Actuators) StillLeading() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.leader && a.ctx.Err() == nil
}

// sleep waits d on clk; it returns false if ctx ends first.
func sleep(ctx context.Context, clk clock.Clock, d time.Duration) bool {
	done := make(chan struct{})
	t := clk.AfterFunc(d, func() { close(done) })
	select {
	case <-done:
		return true
	case <-ctx.Done():
		t.Stop()
		return false
	}
}

// ExpandArgv substitutes {node} and {reason} in every argument. The reason
// loses its control characters (a line break in a Slurm reason breaks
// scontrol's output).
func ExpandArgv(argv []string, node, reason string) []string {
	reason = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, reason)
	r := strings.NewReplacer("{node}", node, "{reason}", reason)
	out := make([]string, len(argv))
	for i, arg := range argv {
		out[i] = r.Replace(arg)
	}
	return out
}

// RunCommand runs an actuator's argv (internal/runcmd: no shell, its own
// process group, killed whole at timeout, 0 meaning DefaultActuatorTimeout).
// The environment is the aggregator's plus GRACEWATCH_NODE,
// GRACEWATCH_TRANSITION and GRACEWATCH_REASON. It returns the exit code (-1
// if it did not exit), the tail of the output and an error unless it exited
// 0.
func RunCommand(ctx context.Context, argv []string, timeout time.Duration, node, on, reason string) (int, string, error) {
	return runCommandEnv(ctx, argv, timeout, "GRACEWATCH_NODE="+node, "GRACEWATCH_TRANSITION="+on, "GRACEWATCH_REASON="+reason)
}

// runCommandEnv is runCommand with the environment variables env added.
func runCommandEnv(ctx context.Context, argv []string, timeout time.Duration, env ...string) (int, string, error) {
	if timeout <= 0 {
		timeout = DefaultActuatorTimeout
	}
	res, err := runcmd.Run(ctx, argv, runcmd.Options{Timeout: timeout, Env: env})
	return res.Exit, res.Output, err
}

// maxConcurrentRuns bounds the actuator commands running at once: a storm
// that drains hundreds of nodes (confirmed past the limit) runs them 16 at
// a time instead of forking hundreds of scontrol processes against one
// slurmctld.
const maxConcurrentRuns = 16

// acquire takes one of the maxConcurrentRuns places, waiting for it; it
// returns false if ctx ends first.
func (a *Actuators) acquire(ctx context.Context) bool {
	select {
	case a.runs <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (a *Actuators) release() { <-a.runs }
