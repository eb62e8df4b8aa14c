package execsys

import (
	"strings"
	"testing"
	"time"
)

// A part of `scontrol show config` of Slurm 22.05 (the real one-node Slurm
// of e2e/slurm_test.go prints it so).
const slurmShowConfig = `Configuration data as of 2026-12-03T08:30:01
AccountingStorageBackupHost = (null)
KillOnBadExit           = 0
KillWait                = 5 sec
OverTimeLimit           = 0 min
UnkillableStepProgram   = (null)
UnkillableStepTimeout   = 60 sec
`

func TestSlurmKillPath(t *testing.T) {
	c, err := ParseSlurmConfig(slurmShowConfig)
	if err != nil {
		t.Fatal(err)
	}
	// 0 min + 30 s + 5 s, plus the margin; drains after 60 s more.
	if c.MinGrace != 40*time.Second || c.Drains != 95*time.Second {
		t.Fatalf("min grace %v drains %v, want 40s and 1m35s", c.MinGrace, c.Drains)
	}
	if w := c.Warnings(10 * time.Second); len(w) != 1 || !strings.Contains(w[0], "smallest safe grace is 40s") || !strings.Contains(w[0], "KillWait 5s") {
		t.Fatalf("warnings for 10s: %q", w)
	}
	if w := c.Warnings(45 * time.Second); len(w) != 0 {
		t.Fatalf("warnings for 45s: %q", w)
	}
	if w := c.Warnings(2 * time.Minute); len(w) != 1 || !strings.Contains(w[0], "drain a node with unkillable processes by itself") {
		t.Fatalf("warnings for 2m: %q", w)
	}
	over := strings.Replace(slurmShowConfig, "OverTimeLimit           = 0 min", "OverTimeLimit           = 2 min", 1)
	if c, err := ParseSlurmConfig(over); err != nil || c.MinGrace != 2*time.Minute+40*time.Second {
		t.Fatalf("OverTimeLimit 2 min: %v %v", c.MinGrace, err)
	}
	unl := strings.Replace(slurmShowConfig, "OverTimeLimit           = 0 min", "OverTimeLimit           = UNLIMITED", 1)
	if _, err := ParseSlurmConfig(unl); err != nil {
		t.Fatalf("OverTimeLimit UNLIMITED: %v", err)
	}
	for _, bad := range []string{"", "KillWait = soon\nUnkillableStepTimeout = 60 sec\n", "KillWait = 30 sec\n"} {
		if _, err := ParseSlurmConfig(bad); err == nil {
			t.Errorf("ParseSlurmConfig(%q): want an error", bad)
		}
	}
}

func TestFluxKillPath(t *testing.T) {
	c, err := ParseFluxExec("null")
	if err != nil {
		t.Fatal(err)
	}
	// flux-config-exec(5): attempts at 25, 30, 40, 60, 100, 180, 340 and
	// 640 s with the defaults (kill-timeout 5s, max-kill-count 8).
	if c.MinGrace != 10*time.Second || c.Drains != 640*time.Second {
		t.Fatalf("defaults: min %v drains %v", c.MinGrace, c.Drains)
	}
	// Its own example: max-kill-count 4 and kill-timeout 1s drain at 12 s.
	if c, err := ParseFluxExec(`{"kill-timeout": "1s", "max-kill-count": 4}`); err != nil || c.Drains != 12*time.Second || c.MinGrace != 6*time.Second {
		t.Fatalf("count 4, 1s: %+v %v", c, err)
	}
	if c, err := ParseFluxExec(`{"kill-timeout": 2.5, "max-kill-timeout": "30m"}`); err != nil || c.Drains != 30*time.Minute || c.MinGrace != 7500*time.Millisecond {
		t.Fatalf("max-kill-timeout: %+v %v", c, err)
	}
	if w := c.Warnings(3 * time.Second); len(w) != 1 || !strings.Contains(w[0], "flux") {
		t.Fatalf("warnings: %q", w)
	}
	for _, bad := range []string{"{", `{"kill-timeout": "soon"}`, `{"max-kill-timeout": true}`} {
		if _, err := ParseFluxExec(bad); err == nil {
			t.Errorf("ParseFluxExec(%q): want an error", bad)
		}
	}
}

// TestKillPathOf: the node's kill-path floor is the largest of its exec
// systems' (a node may run both), cut to its bound, in one line.
func TestKillPathOf(t *testing.T) {
	slurm := Check{System: "slurm", Path: "OverTimeLimit 0s + ...\n" + strings.Repeat("x", 300), MinGrace: 65 * time.Second}
	flux := Check{System: "flux", Path: "kill-timeout 5s", MinGrace: 10 * time.Second}
	floor, path := KillPathOf([]Check{flux, slurm})
	if floor != 65*time.Second || !strings.HasPrefix(path, "slurm: OverTimeLimit 0s + ... x") || len(path) > maxKillPathBytes || strings.Contains(path, "\n") {
		t.Fatalf("KillPathOf = %v, %q", floor, path)
	}
	if f, p := KillPathOf(nil); f != 0 || p != "" {
		t.Fatalf("KillPathOf(nil) = %v, %q", f, p)
	}
}
