package reservation

import (
	"regexp"
	"strings"
	"time"

	"github.com/gracewatch/gracewatch/internal/config"
)

// Defaults of Config (docs/DESIGN.md, "The scheduler's plan", says why).
const (
	// DefaultPrefix begins the name of every reservation gracewatch makes;
	// no other reservation is ever updated or deleted.
	DefaultPrefix = "gracewatch_"
	// DefaultAfter: a teardown is worth a reservation once it has lasted
	// 10 s. Most epilogues end within a few seconds, and Slurm's backfill
	// plans every 30 s by default (bf_interval): a teardown that ends within
	// 10 s costs the scheduler nothing and is never reserved.
	DefaultAfter = 10 * time.Second
	// DefaultMinLeft: a node due to be free within 5 s is not worth a
	// reservation (one backfill pass would not see it).
	DefaultMinLeft = 5 * time.Second
	// DefaultWindow: nodes whose free_at lie within 10 s of each other
	// share a reservation that ends at the latest of them. The nodes of one
	// job end their tasks within a second or two of each other; Slurm
	// rounds a reservation's end up to bf_resolution (60 s by default)
	// anyway.
	DefaultWindow = 10 * time.Second
	// DefaultInterval is the least time between two rounds of commands:
	// changes that arrive together (a 1,000-node job's teardowns) are
	// batched into one round.
	DefaultInterval = time.Second
	// DefaultTimeout bounds one run of the command (its process group is
	// killed).
	DefaultTimeout = 20 * time.Second
	// DefaultMaxDuration caps how far ahead a reservation ends: a free_at
	// further away (a huge per-job grace, an agent's clock far ahead) is
	// reserved this far only, and extended as time goes on.
	DefaultMaxDuration = 24 * time.Hour
)

// Bounds of the planner's work.
const (
	// MaxCommands is the most commands one round runs; the rest wait for
	// the next round (Interval later).
	MaxCommands = 32
	// MaxNodes is the most nodes of one reservation: a larger set is split
	// (an argument of a command holds at most 128 KiB).
	MaxNodes = 4096
	// MaxHostlist is the longest hostlist passed to the command.
	MaxHostlist = 64 << 10
	// Resync is how often the leader lists the reservations again, to
	// notice what changed behind its back (an administrator deleted one,
	// Slurm purged one that ended).
	Resync = time.Minute
	// MaxListed bounds the reservations a list may return.
	MaxListed = 10000
	// maxListOutput bounds the bytes a list may print.
	maxListOutput = 8 << 20
)

// Config is the aggregator's [reservations] table: free_at put into the
// scheduler's own plan.
type Config struct {
	// Command is the site's reservation command, run without a shell with
	// a verb and its arguments appended: "list", "create NAME HOSTLIST
	// END", "update NAME HOSTLIST END", "delete NAME" (END in Unix
	// seconds); packaging/examples/aggregator/slurm-reservation.sh is
	// Slurm's. Empty: no reservations.
	Command []string `toml:"command"`
	// Prefix begins the name of every reservation gracewatch makes, and
	// only such reservations are ever updated or deleted.
	Prefix string `toml:"prefix"`
	// After is how long a node must have been tearing down before it is
	// reserved.
	After config.Duration `toml:"after"`
	// MinLeft: a node whose free_at is less than this ahead is not
	// reserved (one already reserved stays so).
	MinLeft config.Duration `toml:"min_left"`
	// Window: nodes whose free_at lie within Window of each other share a
	// reservation, which ends at the latest of them.
	Window config.Duration `toml:"window"`
	// Interval is the least time between two rounds of commands.
	Interval config.Duration `toml:"interval"`
	// Timeout bounds one run of the command.
	Timeout config.Duration `toml:"timeout"`
	// MaxDuration caps how far ahead a reservation ends.
	MaxDuration config.Duration `toml:"max_duration"`
}

// DefaultConfig returns the [reservations] table's defaults (off: no
// command).
func DefaultConfig() Config {
	return Config{
		Prefix:      DefaultPrefix,
		After:       config.Dur(DefaultAfter),
		MinLeft:     config.Dur(DefaultMinLeft),
		Window:      config.Dur(DefaultWindow),
		Interval:    config.Dur(DefaultInterval),
		Timeout:     config.Dur(DefaultTimeout),
		MaxDuration: config.Dur(DefaultMaxDuration),
	}
}

// Enabled reports whether a command is configured.
func (c Config) Enabled() bool { return len(c.Command) > 0 }

// prefixRE is what a prefix may hold: it goes into the scheduler's
// reservation names and a shell script's patterns.
var prefixRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,31}$`)

// Validate checks the table; every problem is reported, each naming its
// key under table (e.g. "reservations").
func (c Config) Validate(table string) error {
	errs := config.Problems{Prefix: table}
	if len(c.Command) > 0 && c.Command[0] == "" {
		errs.Add("command", "must name a program")
	}
	for _, arg := range c.Command {
		if strings.IndexByte(arg, 0) >= 0 {
			errs.Add("command", "argument %q holds a NUL byte", arg)
		}
	}
	if !prefixRE.MatchString(c.Prefix) {
		errs.Add("prefix", "want a letter, then up to 31 letters, digits, '_' or '-', got %q", c.Prefix)
	}
	between := func(key string, d config.Duration, lo, hi time.Duration) {
		if d.D() < lo || d.D() > hi {
			errs.Add(key, "want %v to %v, got %v", lo, hi, d.D())
		}
	}
	between("after", c.After, 0, 24*time.Hour)
	between("min_left", c.MinLeft, 0, 24*time.Hour)
	between("window", c.Window, 0, time.Hour)
	between("interval", c.Interval, 100*time.Millisecond, 10*time.Minute)
	between("timeout", c.Timeout, time.Second, 10*time.Minute)
	between("max_duration", c.MaxDuration, time.Minute, 365*24*time.Hour)
	return errs.Err()
}

// rules are the durations of Config that the plan goes by.
type rules struct {
	after, minLeft, window, maxDuration time.Duration
}

func (c Config) rules() rules {
	return rules{after: c.After.D(), minLeft: c.MinLeft.D(), window: c.Window.D(), maxDuration: c.MaxDuration.D()}
}
