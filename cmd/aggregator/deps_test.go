package main

import (
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil/depcheck"
)

// TestDependencies: the aggregator links the mesh, its HTTP service and the
// leaf packages it checks requests with (agent/request), and none of the
// node agent's kernel code. A new dependency fails this test until it is
// added here.
func TestDependencies(t *testing.T) {
	depcheck.Check(t, ".", depcheck.Allow{
		Packages: []string{"aggregator", "aggregator/actuate", "aggregator/api", "aggregator/httpapi", "aggregator/intake", "aggregator/metrics", "aggregator/reach", "aggregator/historian", "aggregator/incidents", "aggregator/modes", "aggregator/relay", "aggregator/probe", "aggregator/jobs", "aggregator/cli", "aggregator/nodelog", "aggregator/view", "aggregator/watch", "aggregator/reservation", "aggregator/incident", "aggregator/history", "aggregator/advisor", "agent/request", "agent/report", "mesh",
			"proto/gwpb", "internal/clock", "internal/cmdutil", "internal/config", "internal/fsutil", "internal/hostinfo",
			"internal/hostlist", "internal/jsonbody", "internal/metrics", "internal/nodename", "internal/opt", "internal/ratelog", "internal/runcmd", "internal/secretfile",
			"internal/version"},
		Modules: []string{
			"github.com/beorn7/perks", "github.com/cespare/xxhash/v2", "github.com/coreos/go-systemd/v22",
			"github.com/google/btree", "github.com/hashicorp/errwrap", "github.com/hashicorp/go-immutable-radix",
			"github.com/hashicorp/go-metrics", "github.com/hashicorp/go-msgpack/v2", "github.com/hashicorp/go-multierror",
			"github.com/hashicorp/go-sockaddr", "github.com/hashicorp/golang-lru", "github.com/hashicorp/memberlist",
			"github.com/miekg/dns", "github.com/munnerz/goautoneg", "github.com/pelletier/go-toml/v2",
			"github.com/prometheus/client_golang", "github.com/prometheus/client_model", "github.com/prometheus/common",
			"github.com/prometheus/procfs", "github.com/sean-/seed", "github.com/shirou/gopsutil/v4",
			"golang.org/x/net", "golang.org/x/sys", "google.golang.org/protobuf",
		},
		Never: []string{"agent", "agent/api", "agent/cgroup", "agent/procfs", "agent/diagnose", "agent/teardown"},
	})
}
