package execsys

// The grace G against the exec system's own kill path: a job that runs to
// its time limit is signalled by the exec system some time after E, and a
// G shorter than that makes the agent latch the node DOWN before the exec
// system has even tried (a false DOWN). `nodeagent config check` reads the
// exec system's settings and says which G is safe.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// slurmCheckInterval is how often slurmctld looks for jobs past their time
// limit: PERIODIC_TIMEOUT, 30 s in Slurm 22.05 to 24.x (src/slurmctld/
// controller.c), not a setting. Measured on this project's one-node Slurm:
// a job was killed 29 s after its end time.
const slurmCheckInterval = 30 * time.Second

// killMargin is added to the exec system's path to its SIGKILL: the signal
// travels from the controller to the node and the task must get it.
const killMargin = 5 * time.Second

// Check is what the agent found out about one exec system's kill path.
type Check struct {
	// System is "slurm" or "flux".
	System string
	// Path says how the exec system kills a job at its time limit, with
	// its settings.
	Path string
	// MinGrace is the smallest G that does not latch a node before the
	// exec system's SIGKILL reached the job.
	MinGrace time.Duration
	// Drains, if not zero, is when after E the exec system drains a node
	// with unkillable processes by itself.
	Drains time.Duration
}

// Warnings compares grace with c: what an administrator should change or
// know, one sentence each.
func (c Check) Warnings(grace time.Duration) []string {
	var w []string
	if grace < c.MinGrace {
		w = append(w, fmt.Sprintf("teardown.grace %v is shorter than %s's kill path (%s): a job that runs to its time limit can be latched DOWN before %s has signalled it; the smallest safe grace is %v",
			grace, c.System, c.Path, c.System, c.MinGrace))
	}
	if c.Drains > 0 && grace > c.Drains {
		w = append(w, fmt.Sprintf("teardown.grace %v is longer than %s takes to drain a node with unkillable processes by itself (%v after E): %s's reason, which names nothing, comes first",
			grace, c.System, c.Drains, c.System))
	}
	return w
}

// ParseSlurmConfig reads the output of `scontrol show config`: KillWait,
// UnkillableStepTimeout and OverTimeLimit.
func ParseSlurmConfig(out string) (Check, error) {
	vals := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if ok {
			vals[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	kw, err := slurmDuration(vals, "KillWait", time.Second)
	if err != nil {
		return Check{}, err
	}
	ust, err := slurmDuration(vals, "UnkillableStepTimeout", time.Second)
	if err != nil {
		return Check{}, err
	}
	otl := time.Duration(0)
	if v := vals["OverTimeLimit"]; v != "" && !strings.EqualFold(strings.Fields(v)[0], "UNLIMITED") {
		if otl, err = slurmDuration(vals, "OverTimeLimit", time.Minute); err != nil {
			return Check{}, err
		}
	}
	kill := otl + slurmCheckInterval + kw
	return Check{
		System: "slurm",
		Path: fmt.Sprintf("OverTimeLimit %v + up to %v between slurmctld's time-limit checks + KillWait %v = %v, then UnkillableStepTimeout %v before \"Kill task failed\"",
			otl, slurmCheckInterval, kw, kill, ust),
		MinGrace: kill + killMargin,
		Drains:   kill + ust,
	}, nil
}

// slurmDuration reads "30 sec" or "5 min" (or a bare number of unit).
func slurmDuration(vals map[string]string, key string, unit time.Duration) (time.Duration, error) {
	v, ok := vals[key]
	if !ok {
		return 0, fmt.Errorf("scontrol show config: no %s", key)
	}
	f := strings.Fields(v)
	if len(f) == 0 {
		return 0, fmt.Errorf("scontrol show config: %s is empty", key)
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n < 0 {
		return 0, fmt.Errorf("scontrol show config: %s = %q is not a count of %v", key, v, unit)
	}
	if len(f) > 1 && strings.HasPrefix(f[1], "min") {
		unit = time.Minute
	}
	return time.Duration(n) * unit, nil
}

// ParseFluxExec reads the output of `flux config get exec` (a JSON object,
// or null when [exec] is not configured): kill-timeout, max-kill-count and
// max-kill-timeout, with flux-config-exec(5)'s defaults (5s, 8, unset).
func ParseFluxExec(out string) (Check, error) {
	var cfg struct {
		KillTimeout    any    `json:"kill-timeout"`
		MaxKillCount   *int   `json:"max-kill-count"`
		MaxKillTimeout any    `json:"max-kill-timeout"`
		KillSignal     string `json:"kill-signal"`
	}
	if s := strings.TrimSpace(out); s != "" && s != "null" {
		if err := json.Unmarshal([]byte(s), &cfg); err != nil {
			return Check{}, fmt.Errorf("flux config get exec: %w", err)
		}
	}
	kt := 5 * time.Second
	if cfg.KillTimeout != nil {
		d, err := fsd(cfg.KillTimeout)
		if err != nil {
			return Check{}, fmt.Errorf("flux config get exec: kill-timeout: %w", err)
		}
		kt = d
	}
	count := 8
	if cfg.MaxKillCount != nil {
		count = *cfg.MaxKillCount
	}
	// flux-config-exec(5), JOB TERMINATION: SIGALRM at the time limit,
	// kill-signal after kill-timeout (repeated), then from 5*kill-timeout
	// on directly to the shells with a back-off doubling from kill-timeout
	// (at most 300 s); the node is drained after max-kill-count of those,
	// or at max-kill-timeout when set.
	drains := 5 * kt
	step := kt
	for i := 1; i < count; i++ {
		drains += step
		step = min(2*step, 300*time.Second)
	}
	how := fmt.Sprintf("max-kill-count %d", count)
	if cfg.MaxKillTimeout != nil {
		d, err := fsd(cfg.MaxKillTimeout)
		if err != nil {
			return Check{}, fmt.Errorf("flux config get exec: max-kill-timeout: %w", err)
		}
		drains, how = d, "max-kill-timeout "+d.String()
	}
	return Check{
		System:   "flux",
		Path:     fmt.Sprintf("SIGALRM at the time limit, kill-signal after kill-timeout %v; drained \"unkillable\" after %s, %v after E", kt, how, drains),
		MinGrace: kt + killMargin,
		Drains:   drains,
	}, nil
}

// fsd reads a Flux Standard Duration (RFC 23): a number of seconds, or a
// string with an s, m, h or d suffix.
func fsd(v any) (time.Duration, error) {
	switch x := v.(type) {
	case float64:
		return time.Duration(x * float64(time.Second)), nil
	case string:
		s := strings.TrimSpace(x)
		mult := time.Second
		switch {
		case strings.HasSuffix(s, "ms"):
			mult, s = time.Millisecond, strings.TrimSuffix(s, "ms")
		case strings.HasSuffix(s, "s"):
			s = strings.TrimSuffix(s, "s")
		case strings.HasSuffix(s, "m"):
			mult, s = time.Minute, strings.TrimSuffix(s, "m")
		case strings.HasSuffix(s, "h"):
			mult, s = time.Hour, strings.TrimSuffix(s, "h")
		case strings.HasSuffix(s, "d"):
			mult, s = 24*time.Hour, strings.TrimSuffix(s, "d")
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f < 0 {
			return 0, fmt.Errorf("%q is not a duration", x)
		}
		return time.Duration(f * float64(mult)), nil
	}
	return 0, fmt.Errorf("%v is not a duration", v)
}

// execQueryTimeout bounds each query of an exec system.
const execQueryTimeout = 5 * time.Second

// CheckAll asks the exec systems found in PATH (scontrol, flux)
// for their kill path. A system whose command is missing is skipped; one
// that does not answer is reported as an error (the check is advisory: it
// never fails a configuration).
func CheckAll(ctx context.Context) ([]Check, []error) {
	var checks []Check
	var errs []error
	for _, q := range []struct {
		name  string
		argv  []string
		parse func(string) (Check, error)
	}{
		{"slurm", []string{"scontrol", "show", "config"}, ParseSlurmConfig},
		{"flux", []string{"flux", "config", "get", "exec"}, ParseFluxExec},
	} {
		if _, err := exec.LookPath(q.argv[0]); err != nil {
			continue
		}
		qctx, cancel := context.WithTimeout(ctx, execQueryTimeout)
		out, err := exec.CommandContext(qctx, q.argv[0], q.argv[1:]...).Output()
		cancel()
		if err != nil {
			var ee *exec.ExitError
			msg := err.Error()
			if errors.As(err, &ee) && len(ee.Stderr) > 0 {
				msg += ": " + strings.TrimSpace(string(ee.Stderr))
			}
			errs = append(errs, fmt.Errorf("%s: %s", strings.Join(q.argv, " "), clip(msg, 200)))
			continue
		}
		c, err := q.parse(string(out))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		checks = append(checks, c)
	}
	return checks, errs
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// KillPathTimeout bounds the agent's own check of the exec systems at its
// start (two queries of execQueryTimeout at most).
const KillPathTimeout = 2*execQueryTimeout + time.Second

// maxKillPathBytes bounds StateUpdate.kill_path.
const maxKillPathBytes = 256

// KillPathOf is the node's kill-path floor for the grace advisor: the
// largest MinGrace of the exec systems found (a node may run both), and
// how that one kills, in one line of at most maxKillPathBytes; zero and ""
// when none answered.
func KillPathOf(checks []Check) (time.Duration, string) {
	var best *Check
	for i := range checks {
		if best == nil || checks[i].MinGrace > best.MinGrace {
			best = &checks[i]
		}
	}
	if best == nil {
		return 0, ""
	}
	path := strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, best.System+": "+best.Path)
	if len(path) > maxKillPathBytes {
		cut := maxKillPathBytes - len("...")
		for cut > 0 && !utf8.RuneStart(path[cut]) {
			cut--
		}
		path = path[:cut] + "..."
	}
	return best.MinGrace, path
}
