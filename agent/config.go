package agent

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gracewatch/gracewatch/agent/cgroup"
	"github.com/gracewatch/gracewatch/internal/config"
	"github.com/gracewatch/gracewatch/internal/nodename"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// AutoResume values.
const (
	AutoResumeNever     = "never"
	AutoResumeWhenClean = "when-clean"
)

// Config is the node agent's configuration, read from
// /etc/gracewatch/nodeagent.toml. The zero value is not useful: start from
// DefaultConfig.
type Config struct {
	// NodeName is the node's name in the mesh and in reports; empty means the
	// short host name.
	NodeName string `toml:"node_name"`
	// StateDir holds persisted jobs, the DOWN latch, reports and epilogue
	// output.
	StateDir string `toml:"state_dir"`
	// Socket is the path of the local API's Unix socket.
	Socket string `toml:"socket"`
	// LogFormat is "text" or "json"; LogLevel is debug, info, warn or error.
	LogFormat string `toml:"log_format"`
	LogLevel  string `toml:"log_level"`
	// Mode is "enforce" (the default: at a deadline the agent signals the
	// teardown's processes and latches the node DOWN) or "observe" (it
	// marks the teardown overdue and diagnoses it as in enforce mode, but
	// sends no signal and latches nothing; the aggregators see it as a
	// would-be violation). The rollout path: packaging/README.md, "Observe
	// mode".
	Mode string `toml:"mode"`

	Cgroup      CgroupConfig      `toml:"cgroup"`
	Teardown    TeardownConfig    `toml:"teardown"`
	API         APIConfig         `toml:"api"`
	Diagnostics DiagnosticsConfig `toml:"diagnostics"`
	Mesh        MeshConfig        `toml:"mesh"`
	Metrics     MetricsConfig     `toml:"metrics"`
}

// MetricsConfig is the [metrics] table.
type MetricsConfig struct {
	// Listen is the TCP host:port on which GET /metrics serves the agent's
	// Prometheus metrics (e.g. "127.0.0.1:9470"); empty (the default)
	// serves none.
	Listen string `toml:"listen"`
}

// MeshConfig is the agent's [mesh] table: mesh.Config plus the switch.
type MeshConfig struct {
	// Enabled joins the gossip mesh. Off, the agent works alone (local API
	// and diagnostics only).
	Enabled bool `toml:"enabled"`
	mesh.Config
}

// CgroupConfig places the agent's cgroup subtree.
type CgroupConfig struct {
	// Root is the absolute path of the subtree the agent owns (for example
	// /sys/fs/cgroup/gracewatch). Empty means the agent's own, delegated
	// cgroup (systemd Delegate=yes); the agent then moves itself into a leaf
	// named "agent" below it.
	Root string `toml:"root"`
	// Mount overrides detection of the cgroup v2 mount point.
	Mount string `toml:"mount"`
}

// TeardownConfig sets the time model and escalation.
type TeardownConfig struct {
	// Grace is G, added to min(T_end, E) to get the deadline D.
	Grace config.Duration `toml:"grace"`
	// KillWait is the time between SIGTERM and SIGKILL.
	KillWait config.Duration `toml:"kill_wait"`
	// UnkillableAfter is the time after SIGKILL after which survivors are
	// classified and reported.
	UnkillableAfter config.Duration `toml:"unkillable_after"`
	// AutoResume is "never" (an administrator resumes) or "when-clean" (the
	// latch clears once every process of the violating teardown is gone).
	AutoResume string `toml:"auto_resume"`
	// SignalForeign allows signals to processes of job cgroups the agent only
	// observes (Slurm's, Flux's). Off by default.
	SignalForeign bool `toml:"signal_foreign"`
	// MaxExpirationAge refuses registrations whose expiration lies further in
	// the past than this.
	MaxExpirationAge config.Duration `toml:"max_expiration_age"`
	// ForeignCgroups lists the exec systems' job cgroups the agent may
	// observe (--cgroup of job start, job update and epilog): patterns
	// "0::/glob" (cgroup v2), "controllers:/glob" (a v1 hierarchy) or
	// absolute directory globs; a pattern admits the cgroups it matches
	// and their descendants. Any other cgroup is refused.
	ForeignCgroups []string `toml:"foreign_cgroups"`
	// ExpirationCommand, if set, is the argv the agent runs (once per
	// expiration, "{job}" replaced by the job's id) just before it would
	// make a job overdue whose end was never reported: it prints the job's
	// current expiration as the exec system knows it (RFC 3339, Unix
	// seconds, or 0 for none), so that a time limit extended there alone
	// moves the deadline instead of latching the node DOWN.
	ExpirationCommand []string `toml:"expiration_command"`
	// ExpirationTimeout bounds one run of ExpirationCommand.
	ExpirationTimeout config.Duration `toml:"expiration_timeout"`
	// OutputTail is how much of each of an epilogue's streams (stdout,
	// stderr) the state dir keeps while its teardown goes on: the end of
	// it ("64KiB"; 4KiB to 1GiB). An attached `nodeagent epilog` receives
	// all of the output as it comes; the files are removed at the release.
	OutputTail config.Size `toml:"output_tail"`
}

// Bounds of [teardown] output_tail.
const (
	minOutputTail = 4 << 10
	maxOutputTail = 1 << 30
)

// DefaultForeignCgroups are Slurm's job cgroups: proctrack/cgroup on cgroup
// v1 (freezer:/slurm/uid_U/job_J, or slurm_NODE with several slurmd on a
// host) and cgroup/v2 under systemd.
var DefaultForeignCgroups = []string{"freezer:/slurm*", "0::/system.slice/slurmstepd.scope/job_*"}

// APIConfig controls who may use the local socket.
type APIConfig struct {
	// AllowedUIDs and AllowedGIDs list peers (by SO_PEERCRED) allowed to use
	// the socket; uid 0 is always allowed.
	AllowedUIDs []int `toml:"allowed_uids"`
	AllowedGIDs []int `toml:"allowed_gids"`
	// SocketGroup, if set, is the group owner of the socket (mode 0660).
	SocketGroup string `toml:"socket_group"`
	// StopWait is how long a stopping agent waits for the epilog streams
	// in progress, so that their callers get the exit status (0: none).
	StopWait config.Duration `toml:"stop_wait"`
}

// DiagnosticsConfig bounds the hung-process diagnostics.
type DiagnosticsConfig struct {
	// ProcRoot is the procfs mount (tests point it elsewhere).
	ProcRoot string `toml:"proc_root"`
	// ReadTimeout bounds each /proc read of a supervised process.
	ReadTimeout config.Duration `toml:"read_timeout"`
	// MaxBlockedReads bounds reads that did not return and are still
	// outstanding; beyond it further reads are refused at once.
	MaxBlockedReads int `toml:"max_blocked_reads"`
	// SampleInterval is the time between the two thread samples of a snapshot.
	SampleInterval config.Duration `toml:"sample_interval"`
	// MaxReports is how many reports are kept under StateDir/reports.
	MaxReports int `toml:"max_reports"`
}

// DefaultConfig returns the configuration used when a key is absent.
func DefaultConfig() Config {
	return Config{
		StateDir:  "/var/lib/gracewatch",
		Socket:    "/run/gracewatch/agent.sock",
		LogFormat: "text",
		LogLevel:  "info",
		Mode:      config.ModeEnforce,
		Teardown: TeardownConfig{
			Grace:             config.Dur(120 * time.Second),
			KillWait:          config.Dur(10 * time.Second),
			UnkillableAfter:   config.Dur(30 * time.Second),
			AutoResume:        AutoResumeNever,
			MaxExpirationAge:  config.Dur(24 * time.Hour),
			ForeignCgroups:    slices.Clone(DefaultForeignCgroups),
			ExpirationTimeout: config.Dur(10 * time.Second),
			OutputTail:        config.Bytes(64 << 10),
		},
		API: APIConfig{AllowedUIDs: []int{0}, StopWait: config.Dur(20 * time.Second)},
		Diagnostics: DiagnosticsConfig{
			ProcRoot:        "/proc",
			ReadTimeout:     config.Dur(2 * time.Second),
			MaxBlockedReads: 16,
			SampleInterval:  config.Dur(2 * time.Second),
			MaxReports:      100,
		},
		Mesh: MeshConfig{Config: mesh.DefaultConfig()},
	}
}

// LoadConfig reads path over the defaults and validates the result. An empty
// path gives the defaults.
func LoadConfig(path string) (Config, error) { return config.LoadWith(path, ParseConfig) }

// ParseConfig decodes data, the content of the file named name, over the
// defaults and validates the result; nil data gives the defaults. Errors
// name the file, and the line and key where the TOML decoder knows them.
func ParseConfig(name string, data []byte) (Config, error) {
	return config.Parse(name, data, DefaultConfig())
}

// Validate checks values that decode but make no sense, and fills NodeName.
func (c *Config) Validate() error {
	var errs config.Problems
	if c.NodeName == "" {
		h, err := os.Hostname()
		if err != nil {
			errs.Add("node_name", "empty and the host name is unknown: %v", err)
		} else {
			if i := indexByte(h, '.'); i > 0 {
				h = h[:i]
			}
			if err := nodename.Validate(h); err != nil {
				errs.Add("node_name", "empty, and the host name is not a node name: %v; set node_name", err)
			}
			c.NodeName = h
		}
	} else if err := nodename.Validate(c.NodeName); err != nil {
		errs.Add("node_name", "%v", err)
	}
	if !filepath.IsAbs(c.StateDir) {
		errs.Add("state_dir", "must be an absolute path, got %q", c.StateDir)
	}
	if !filepath.IsAbs(c.Socket) {
		errs.Add("socket", "must be an absolute path, got %q", c.Socket)
	}
	if len(c.Socket) > 107 {
		errs.Add("socket", "path is %d bytes, longer than a Unix socket address allows (107)", len(c.Socket))
	}
	if c.Cgroup.Root != "" && !filepath.IsAbs(c.Cgroup.Root) {
		errs.Add("cgroup.root", "must be an absolute path, got %q", c.Cgroup.Root)
	}
	config.CheckCommon(c.LogFormat, c.LogLevel, c.Mode, errs.Add)
	t := c.Teardown
	if t.Grace.D() < 0 {
		errs.Add("teardown.grace", "must not be negative, got %v", t.Grace.D())
	}
	if t.KillWait.D() <= 0 {
		errs.Add("teardown.kill_wait", "must be positive, got %v", t.KillWait.D())
	}
	if t.UnkillableAfter.D() <= 0 {
		errs.Add("teardown.unkillable_after", "must be positive, got %v", t.UnkillableAfter.D())
	}
	if t.AutoResume != AutoResumeNever && t.AutoResume != AutoResumeWhenClean {
		errs.Add("teardown.auto_resume", "must be %q or %q, got %q", AutoResumeNever, AutoResumeWhenClean, t.AutoResume)
	}
	if t.MaxExpirationAge.D() <= 0 {
		errs.Add("teardown.max_expiration_age", "must be positive, got %v", t.MaxExpirationAge.D())
	}
	if _, err := cgroup.ParseAllowList(t.ForeignCgroups); err != nil {
		errs.Add("teardown.foreign_cgroups", "%v", err)
	}
	if len(t.ExpirationCommand) > 0 && !filepath.IsAbs(t.ExpirationCommand[0]) {
		errs.Add("teardown.expiration_command", "the command must be an absolute path, got %q", t.ExpirationCommand[0])
	}
	if to := t.ExpirationTimeout.D(); to < time.Second || to > 5*time.Minute {
		errs.Add("teardown.expiration_timeout", "must be between 1s and 5m, got %v", to)
	}
	if n := t.OutputTail.N(); n < minOutputTail || n > maxOutputTail {
		errs.Add("teardown.output_tail", "must be between 4KiB and 1GiB, got %d bytes", n)
	}
	for _, u := range c.API.AllowedUIDs {
		if u < 0 {
			errs.Add("api.allowed_uids", "negative uid %d", u)
		}
	}
	for _, g := range c.API.AllowedGIDs {
		if g < 0 {
			errs.Add("api.allowed_gids", "negative gid %d", g)
		}
	}
	if w := c.API.StopWait.D(); w < 0 || w > 10*time.Minute {
		errs.Add("api.stop_wait", "must be between 0 and 10m, got %v", w)
	}
	d := c.Diagnostics
	if !filepath.IsAbs(d.ProcRoot) {
		errs.Add("diagnostics.proc_root", "must be an absolute path, got %q", d.ProcRoot)
	}
	if d.ReadTimeout.D() <= 0 {
		errs.Add("diagnostics.read_timeout", "must be positive, got %v", d.ReadTimeout.D())
	}
	if d.MaxBlockedReads < 1 {
		errs.Add("diagnostics.max_blocked_reads", "must be at least 1, got %d", d.MaxBlockedReads)
	}
	if d.SampleInterval.D() < 0 {
		errs.Add("diagnostics.sample_interval", "must not be negative, got %v", d.SampleInterval.D())
	}
	if d.MaxReports < 1 {
		errs.Add("diagnostics.max_reports", "must be at least 1, got %d", d.MaxReports)
	}
	if l := c.Metrics.Listen; l != "" {
		if _, port, err := net.SplitHostPort(l); err != nil || !validPort(port) {
			errs.Add("metrics.listen", "want host:port (e.g. \"127.0.0.1:9470\") or empty, got %q", l)
		}
	}
	if c.Mesh.Enabled {
		errs.Include(c.Mesh.Config.ValidateRole(gwpb.Role_ROLE_AGENT))
	} else if set := c.Mesh.setKeys(); len(set) > 0 {
		// An agent with [mesh] join or keyring set but without enabled
		// ran alone, silently: say so rather than guess.
		errs.Add("mesh.enabled", "is false, but %s %s set: set enabled = true to join the mesh, or remove %s to run without it",
			strings.Join(set, ", "), map[bool]string{true: "is", false: "are"}[len(set) == 1], map[bool]string{true: "it", false: "them"}[len(set) == 1])
	}
	return errs.Err()
}

// setKeys lists the [mesh] keys other than enabled whose values differ
// from the defaults, by their dotted names.
func (m MeshConfig) setKeys() []string {
	d := mesh.DefaultConfig()
	var set []string
	add := func(differs bool, key string) {
		if differs {
			set = append(set, "mesh."+key)
		}
	}
	add(m.Bind != d.Bind, "bind")
	add(m.Advertise != d.Advertise, "advertise")
	add(len(m.Join) > 0, "join")
	add(m.Label != d.Label, "label")
	add(m.Keyring != d.Keyring, "keyring")
	add(m.Insecure != d.Insecure, "insecure")
	add(m.RejoinInterval != d.RejoinInterval, "rejoin_interval")
	add(m.NodeKeyFile != "", "node_key_file")
	add(m.AggregatorKeysFile != "", "aggregator_keys_file")
	add(m.SiteKeyFile != "", "site_key_file")
	add(m.AllowUnsigned, "allow_unsigned")
	return set
}

// validPort reports whether p is a port number from 1 to 65535.
func validPort(p string) bool {
	n, err := strconv.ParseUint(p, 10, 16)
	return err == nil && n > 0
}

func indexByte(s string, b byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == b {
			return i
		}
	}
	return -1
}
