package actuate

// The [[actuator]] tables of the configuration.

import (
	"time"

	"github.com/gracewatch/gracewatch/internal/config"
)

// Config is one [[actuator]] table: a command run on a transition.
type Config struct {
	// On is "down" (the node entered down), "up" (it is up again after a
	// down whose on="down" actuators all succeeded here) or "reason" (its
	// reason changed while it stays down, drained by gracewatch).
	On string `toml:"on"`
	// Command is the argv, run without a shell; "{node}" and "{reason}" are
	// replaced in every argument. An on="up" command may take "{nodes}"
	// instead (and then neither of the others): it runs once for the
	// nodes that come up within BatchDelay, with their hostlist.
	Command []string `toml:"command"`
	// Timeout bounds one run (the whole process group is killed); 0 or
	// absent means 30s.
	Timeout config.Duration `toml:"timeout"`
	// Retries is how many times a failed run is retried, with exponential
	// back-off; absent means 5.
	Retries *int `toml:"retries"`
}

// ReasonEvery bounds how often the on="reason" actuators run for one node.
const ReasonEvery = 5 * time.Second

// Actuator transitions (Config.On).
const (
	OnDown = "down"
	OnUp   = "up"
	// OnReason runs when the reason of a node that gracewatch drained
	// changes while it stays down (the diagnosis followed the hang: a
	// class got worse or better, the processes are gone), at most once
	// every ReasonEvery per node, with the latest reason: the scheduler's
	// reason says what is true now. It never runs for a node gracewatch
	// did not drain.
	OnReason = "reason"
)

// Defaults of Config.
const (
	DefaultActuatorTimeout = 30 * time.Second
	DefaultActuatorRetries = 5
)
