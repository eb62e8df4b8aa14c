package aggregator

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/actuate"
	"github.com/gracewatch/gracewatch/aggregator/historian"
	"github.com/gracewatch/gracewatch/aggregator/httpapi"
	"github.com/gracewatch/gracewatch/aggregator/incident"
	"github.com/gracewatch/gracewatch/aggregator/reservation"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/config"
	"github.com/gracewatch/gracewatch/internal/nodename"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// DefaultConfigPath is where the aggregator's configuration is installed.
const DefaultConfigPath = "/etc/gracewatch/aggregator.toml"

// Defaults of the configuration.
const (
	DefaultListen             = "127.0.0.1:8470"
	DefaultGrace              = 120 * time.Second
	DefaultClockSkewAllowance = 5 * time.Second
	// DefaultUnreachableAfter is long enough for a member that memberlist
	// wrongly declared dead to refute it (well under a second under 10 %
	// packet loss and at the heal of a partition; BENCHMARKS.md, "Faults").
	DefaultUnreachableAfter = 2 * time.Second
	// DefaultSettle covers what a newly seen node's agent needs to hear
	// of this aggregator and send it its state: the gossip that spreads a
	// joined member (about 1.1 s to every member at 10,000, BENCHMARKS.md
	// "Convergence and detection at scale") and a retried send or two.
	DefaultSettle = 3 * time.Second
)

// Config is the aggregator's configuration, read from
// /etc/gracewatch/aggregator.toml. Start from DefaultConfig.
type Config struct {
	// Name is this aggregator's member name in the mesh; empty means
	// "aggregator-" and the short host name. It must differ from every node
	// name. Among live aggregators the lowest name runs the actuators.
	Name string `toml:"name"`
	// LogFormat is "text" or "json"; LogLevel is debug, info, warn or error.
	LogFormat string `toml:"log_format"`
	LogLevel  string `toml:"log_level"`
	// Mode is "enforce" (the default) or "observe": in observe mode no
	// actuator runs (no drain, no resume, no reservation command), a node
	// whose teardown is overdue (by its agent's word or the central
	// deadline) or whose agent latched it DOWN for a violation is served
	// schedulable, with the drain that would have run (Node.WouldDrain).
	// An administrator's drain is still served down. packaging/README.md,
	// "Observe mode".
	Mode string `toml:"mode"`
	// StateDir is where the actuators keep the nodes gracewatch drained,
	// so that a restarted aggregator still undrains them. Empty: systemd's
	// $STATE_DIRECTORY when set (the packaged unit's
	// /var/lib/gracewatch-aggregator), else memory only.
	StateDir string `toml:"state_dir"`

	Mesh      mesh.Config      `toml:"mesh"`
	HTTP      httpapi.Config   `toml:"http"`
	Policy    PolicyConfig     `toml:"policy"`
	Actuators []actuate.Config `toml:"actuator"`
	// Reservations puts free_at into the scheduler's own plan
	// (aggregator/reservation; packaging/README.md, "The scheduler's
	// plan").
	Reservations reservation.Config `toml:"reservations"`
	// Incidents groups the DOWN nodes by cause, limits the drains and
	// resumes an incident's nodes when its cause clears
	// (aggregator/incident; packaging/README.md, "Incidents").
	Incidents incident.Config `toml:"incidents"`
	// History keeps every released teardown for the grace advisor
	// (package aggregator/historian; packaging/README.md, "Choosing G").
	History historian.Config `toml:"history"`
}

// PolicyConfig is the [policy] table: the cluster's time model.
type PolicyConfig struct {
	// Grace is the cluster's grace period G, served by /v1/config so that
	// the scheduler adds the same G as the agents.
	Grace config.Duration `toml:"grace"`
	// ClockSkewAllowance is added to a teardown deadline before the
	// aggregator serves a silent node down.
	ClockSkewAllowance config.Duration `toml:"clock_skew_allowance"`
	// UnreachableIsDown serves unreachable nodes as down (which runs the
	// on="down" actuators). Off, they are served unreachable, which is not
	// schedulable either, and no actuator runs.
	UnreachableIsDown bool `toml:"unreachable_is_down"`
	// UnreachableAfter is how long a member must stay dead or left before
	// it is served unreachable; until then it keeps its state. 0: at once.
	UnreachableAfter config.Duration `toml:"unreachable_after"`
	// Settle is how long a node this aggregator has just come to know has
	// to send its own state before gossip alone can make it down, and
	// before the actuators act on it (see Policy.Settle). 0: at once.
	Settle config.Duration `toml:"settle"`
}

// DefaultConfig returns the configuration used when a key is absent.
func DefaultConfig() Config {
	return Config{
		LogFormat: "text",
		LogLevel:  "info",
		Mode:      config.ModeEnforce,
		Mesh:      mesh.DefaultConfig(),
		HTTP:      httpapi.Config{Listen: DefaultListen, MaxWatchers: httpapi.DefaultMaxWatchers, MaxConnsPerSource: httpapi.DefaultMaxConnsPerSource},
		Policy: PolicyConfig{
			Grace:              config.Dur(DefaultGrace),
			ClockSkewAllowance: config.Dur(DefaultClockSkewAllowance),
			UnreachableAfter:   config.Dur(DefaultUnreachableAfter),
			Settle:             config.Dur(DefaultSettle),
		},
		Reservations: reservation.DefaultConfig(),
		Incidents:    incident.DefaultConfig(),
		History:      historian.DefaultConfig(),
	}
}

// LoadConfig reads path over the defaults and validates the result. An empty
// path gives the defaults. Errors name the file, and the line and key where
// the TOML decoder knows them.
func LoadConfig(path string) (Config, error) { return config.LoadWith(path, ParseConfig) }

// ParseConfig decodes data, the content of the file named name, over the
// defaults and validates the result; nil data gives the defaults. Errors
// name the file, and the line and key where the TOML decoder knows them.
func ParseConfig(name string, data []byte) (Config, error) {
	return config.Parse(name, data, DefaultConfig())
}

// Validate checks values that decode but make no sense, fills Name and the
// actuators' defaults. Every problem is reported, each naming its key.
func (c *Config) Validate() error {
	var errs config.Problems
	if c.Name == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			errs.Add("name", "empty and the host name is unknown: %v", err)
		}
		h, _, _ = strings.Cut(h, ".")
		c.Name = "aggregator-" + h
	}
	if c.StateDir != "" && !filepath.IsAbs(c.StateDir) {
		errs.Add("state_dir", "must be an absolute path, got %q", c.StateDir)
	}
	if err := nodename.Validate(c.Name); err != nil {
		errs.Add("name", "%v", err)
	}
	config.CheckCommon(c.LogFormat, c.LogLevel, c.Mode, errs.Add)
	errs.Include(c.Mesh.ValidateRole(gwpb.Role_ROLE_AGGREGATOR))
	errs.Include(c.HTTP.Validate("http"))

	p := c.Policy
	if p.Grace.D() < 0 {
		errs.Add("policy.grace", "must not be negative, got %v", p.Grace.D())
	}
	if d := p.ClockSkewAllowance.D(); d < 0 || d > time.Hour {
		errs.Add("policy.clock_skew_allowance", "want 0 to 1h, got %v", d)
	}
	if d := p.UnreachableAfter.D(); d < 0 || d > time.Hour {
		errs.Add("policy.unreachable_after", "want 0 to 1h, got %v", d)
	}
	if d := p.Settle.D(); d < 0 || d > time.Hour {
		errs.Add("policy.settle", "want 0 to 1h, got %v", d)
	}

	errs.Include(c.Reservations.Validate("reservations"))
	errs.Include(c.Incidents.Validate("incidents"))
	errs.Include(c.History.Validate("history"))
	errs.Include(actuate.ValidateConfigs(c.Actuators, "actuator"))
	return errs.Err()
}

// Warnings lists what a valid configuration does that its operator
// likely does not want, one line each naming the key; serve logs them and
// config check prints them.
func (c *Config) Warnings() []string {
	var w []string
	if c.HTTP.ReadToken && c.HTTP.ReadTokenFile == "" {
		w = append(w, `key "http.read_token": the read endpoints take the admin token only, so every reader (the status page, Prometheus, scripts) must hold the token that drains nodes; set http.read_token_file to a separate read token`)
	}
	return w
}

// ViewPolicy returns the policy of Compute.
func (c *Config) ViewPolicy() view.Policy {
	return view.Policy{
		ClockSkewAllowance: c.Policy.ClockSkewAllowance.D(),
		UnreachableIsDown:  c.Policy.UnreachableIsDown,
		UnreachableAfter:   c.Policy.UnreachableAfter.D(),
		Settle:             c.Policy.Settle.D(),
		Observe:            c.Mode == config.ModeObserve,
	}
}
