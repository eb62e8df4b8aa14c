package cgroup_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/gracewatch/gracewatch/agent/cgroup"
)

// delegatedEnv makes the test binary, started by TestNewDelegated inside a
// test cgroup, act as an agent under systemd Delegate=yes.
const delegatedEnv = "GW_CGROUP_TEST_DELEGATED"

func TestMain(m *testing.M) {
	// The test binary is also the shim of the ForceShim tests.
	cgroup.RunShimIfRequested()
	if os.Getenv(delegatedEnv) == "1" {
		os.Exit(delegatedChild())
	}
	goleak.VerifyTestMain(m)
}

// delegatedReport is what delegatedChild prints for its parent test.
type delegatedReport struct {
	Root   string
	Before string
	After  string
	Err    string
	// Refusals of destructive calls on the agent's own cgroup.
	KillSelf, SignalSelf, RemoveSelf string
}

func delegatedChild() int {
	var r delegatedReport
	r.Before, _ = readOwnCgroup()
	m, err := cgroup.New(cgroup.Options{})
	if err != nil {
		r.Err = err.Error()
	} else {
		r.Root = m.Root()
		r.After, _ = readOwnCgroup()
		leaf := filepath.Join(m.Root(), cgroup.AgentLeaf)
		if _, err := m.Kill(leaf); err != nil {
			r.KillSelf = err.Error()
		}
		if _, err := m.Signal(m.Root(), syscall.SIGKILL); err != nil {
			r.SignalSelf = err.Error()
		}
		if err := m.Remove(leaf); err != nil {
			r.RemoveSelf = err.Error()
		}
		m.Close()
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func readOwnCgroup() (string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	defer f.Close()
	return cgroup.OwnCgroup(f)
}
