package actuate

// The [[actuator]] tables of the configuration.

import (
	"fmt"
	"regexp"
	"strings"
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

// placeholder matches "{word}" in actuator arguments.
var placeholder = regexp.MustCompile(`\{[A-Za-z_]+\}`)

// ValidateConfigs checks the [[actuator]] tables cs (table names them in
// the errors: "actuator") and fills their defaults (Timeout, Retries).
// Every problem is reported, each naming its key.
func ValidateConfigs(cs []Config, table string) error {
	var errs config.Problems
	var haveDown, haveUp bool
	for i := range cs {
		a := &cs[i]
		key := func(k string) string { return fmt.Sprintf("%s[%d].%s", table, i, k) }
		switch a.On {
		case OnDown:
			haveDown = true
		case OnUp:
			haveUp = true
		case OnReason:
		default:
			errs.Add(key("on"), "must be %q, %q or %q, got %q", OnDown, OnUp, OnReason, a.On)
		}
		if len(a.Command) == 0 || a.Command[0] == "" {
			errs.Add(key("command"), "must name a program")
		}
		batch := IsBatch(*a)
		if batch && a.On != OnUp {
			errs.Add(key("command"), "{nodes} is for on = %q actuators only (a drain's reason is each node's own)", OnUp)
		}
		for _, arg := range a.Command {
			for _, ph := range placeholder.FindAllString(arg, -1) {
				switch {
				case ph == "{nodes}":
				case ph != "{node}" && ph != "{reason}":
					errs.Add(key("command"), "unknown placeholder %s in %q (want {node}, {reason} or, on = \"up\", {nodes})", ph, arg)
				case batch:
					errs.Add(key("command"), "%s in %q: a command with {nodes} runs once for many nodes and takes no %s", ph, arg, ph)
				}
			}
			if strings.IndexByte(arg, 0) >= 0 {
				errs.Add(key("command"), "argument %q holds a NUL byte", arg)
			}
		}
		switch d := a.Timeout.D(); {
		case d == 0:
			a.Timeout = config.Dur(DefaultActuatorTimeout)
		case d < 0:
			errs.Add(key("timeout"), "must be positive, got %v", d)
		}
		if a.Retries == nil {
			r := DefaultActuatorRetries
			a.Retries = &r
		} else if *a.Retries < 0 || *a.Retries > 100 {
			errs.Add(key("retries"), "want 0 to 100, got %d", *a.Retries)
		}
	}
	if haveUp && !haveDown {
		errs.Add(table, "an on = \"up\" actuator runs only after on = \"down\" ones succeeded, and there is none")
	}
	return errs.Err()
}
