package config

// Modes of the agent's and the aggregator's top-level key "mode": what
// gracewatch does when a teardown passes its deadline. Both programs take
// the same values, and a cluster runs in one of them (a mixed cluster is
// served, and said to be mixed, during a rollout).
const (
	// ModeEnforce signals the overdue teardown's processes, latches the
	// node DOWN and drains it: the default.
	ModeEnforce = "enforce"
	// ModeObserve measures and diagnoses as ModeEnforce, but signals,
	// latches and drains nothing: the overdue teardown is served as a
	// would-be violation.
	ModeObserve = "observe"
)

// ValidMode reports whether m is a mode.
func ValidMode(m string) bool { return m == ModeEnforce || m == ModeObserve }

// CheckCommon checks the keys both daemons' files share (log_format,
// log_level, mode), reporting each bad one to bad with its key.
func CheckCommon(logFormat, logLevel, mode string, bad func(key, format string, a ...any)) {
	if logFormat != "text" && logFormat != "json" {
		bad("log_format", "must be \"text\" or \"json\", got %q", logFormat)
	}
	switch logLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("log_level", "must be debug, info, warn or error, got %q", logLevel)
	}
	if !ValidMode(mode) {
		bad("mode", "must be %q or %q, got %q", ModeEnforce, ModeObserve, mode)
	}
}
