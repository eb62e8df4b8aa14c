package agent

import (
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/config"
	"github.com/gracewatch/gracewatch/internal/testutil"
)

// The configuration the tests' real agents run with (testutil.AgentConfig)
// is one the agent reads, with every value the tests chose and the
// defaults where they chose none.
func TestTestAgentConfig(t *testing.T) {
	full := testutil.AgentConfig{Node: "n1", StateDir: "/tmp/gw/state", Socket: "/tmp/gw/agent.sock", CgroupRoot: "/sys/fs/cgroup/gw",
		LogLevel: "info", Grace: "3s", KillWait: "1s", UnkillableAfter: "2s", AutoResume: "when-clean",
		Teardown: "signal_foreign = true\n", SampleInterval: "300ms", ReadTimeout: "1s",
		Sections: "[metrics]\nlisten = \"127.0.0.1:9470\"\n"}
	cfg, err := ParseConfig("full", []byte(full.Text()))
	if err != nil {
		t.Fatalf("%v\n%s", err, full.Text())
	}
	dur := func(d config.Duration) time.Duration { return d.D() }
	if cfg.NodeName != "n1" || cfg.StateDir != "/tmp/gw/state" || cfg.Socket != "/tmp/gw/agent.sock" || cfg.Cgroup.Root != "/sys/fs/cgroup/gw" ||
		cfg.LogLevel != "info" || cfg.LogFormat != "json" || dur(cfg.Teardown.Grace) != 3*time.Second || dur(cfg.Teardown.KillWait) != time.Second ||
		cfg.Teardown.AutoResume != "when-clean" || !cfg.Teardown.SignalForeign || dur(cfg.Diagnostics.SampleInterval) != 300*time.Millisecond ||
		dur(cfg.Diagnostics.ReadTimeout) != time.Second || cfg.Metrics.Listen != "127.0.0.1:9470" {
		t.Errorf("read back as %+v from\n%s", cfg, full.Text())
	}
	bare := testutil.AgentConfig{Node: "n2", StateDir: "/tmp/gw/state", Socket: "/tmp/gw/agent.sock", CgroupRoot: "/sys/fs/cgroup/gw"}
	cfg, err = ParseConfig("bare", []byte(bare.Text()))
	if err != nil {
		t.Fatalf("%v\n%s", err, bare.Text())
	}
	def := DefaultConfig()
	if cfg.LogLevel != "debug" || cfg.Teardown.Grace != def.Teardown.Grace || cfg.Diagnostics.ReadTimeout != def.Diagnostics.ReadTimeout {
		t.Errorf("defaults not kept: %+v from\n%s", cfg, bare.Text())
	}
}
