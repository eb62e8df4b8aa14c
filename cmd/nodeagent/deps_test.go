package main

import (
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil/depcheck"
)

// TestDependencies: the client that an exec system starts for every job
// links the socket API, the CLI and their leaf packages, and nothing of the
// daemon: not the agent's kernel code (cgroups, /proc, diagnostics), the
// supervisor, the mesh, the metrics nor gopsutil, whose initialisation
// alone took longer than the rest of its start (BENCHMARKS.md, "Epilogue
// latency"). Nor the socket API's server, nor net/http and TLS, which
// the client's own HTTP (agent/api/transport.go) replaces: they were half of
// its start. A new dependency fails this test until it is added here.
func TestDependencies(t *testing.T) {
	depcheck.Check(t, ".", depcheck.Allow{
		Packages: []string{"agent/api", "agent/cli", "agent/report", "agent/request",
			"internal/clock", "internal/cmdutil", "internal/config", "internal/jsonbody", "internal/version"},
		Modules: []string{"github.com/pelletier/go-toml/v2", "golang.org/x/sys"},
		Never: []string{"agent", "agent/api/server", "agent/cgroup", "agent/procfs", "agent/diagnose", "agent/teardown",
			"mesh", "internal/metrics", "internal/hostinfo", "proto/gwpb"},
		NeverStd: []string{"net/http", "crypto/tls", "os/user"},
	})
}
