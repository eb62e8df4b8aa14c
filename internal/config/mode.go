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
