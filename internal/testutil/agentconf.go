package testutil

import (
	"cmp"
	"fmt"
	"strings"
)

// AgentConfig is a node agent's configuration file as the tests that start
// real agents write it (the agent's own end-to-end tests, the e2e
// clusters): JSON logs, state in StateDir, the cgroup root and the
// teardown's times the test chose; what is empty keeps the agent's default.
type AgentConfig struct {
	Node, StateDir, Socket, CgroupRoot string
	// LogLevel is log_level; empty: debug.
	LogLevel string
	// Grace, KillWait, UnkillableAfter and AutoResume are the [teardown]
	// keys; Teardown is more [teardown] lines.
	Grace, KillWait, UnkillableAfter, AutoResume string
	Teardown                                     string
	// SampleInterval and ReadTimeout are the [diagnostics] keys.
	SampleInterval, ReadTimeout string
	// Sections are more sections ([mesh], [metrics]), as TOML.
	Sections string
}

// Text is the configuration file.
func (c AgentConfig) Text() string {
	var b strings.Builder
	key := func(name, v string) {
		if v != "" {
			fmt.Fprintf(&b, "%s = %q\n", name, v)
		}
	}
	key("node_name", c.Node)
	key("state_dir", c.StateDir)
	key("socket", c.Socket)
	key("log_format", "json")
	key("log_level", cmp.Or(c.LogLevel, "debug"))
	b.WriteString("\n[cgroup]\n")
	key("root", c.CgroupRoot)
	b.WriteString("\n[teardown]\n")
	key("grace", c.Grace)
	key("kill_wait", c.KillWait)
	key("unkillable_after", c.UnkillableAfter)
	key("auto_resume", c.AutoResume)
	b.WriteString(c.Teardown)
	b.WriteString("\n[diagnostics]\n")
	key("sample_interval", c.SampleInterval)
	key("read_timeout", c.ReadTimeout)
	if c.Sections != "" {
		b.WriteString("\n" + c.Sections)
	}
	return b.String()
}
