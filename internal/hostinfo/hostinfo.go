// Package hostinfo reads the node's context that both programs report: load
// average, memory, uptime and the free space of their state directory
// (docs/DESIGN.md §3.3). It reads them through github.com/shirou/gopsutil/v4,
// not by hand from /proc.
//
// The node agent's client (cmd/nodeagent) must not link this package: the
// exec system starts that client for every job, and gopsutil is server-side
// weight. agent/diagnose therefore takes the node's facts through a function
// (diagnose.Options.Host) that the agent wires to a Reader.
package hostinfo

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/shirou/gopsutil/v4/common"
	"github.com/shirou/gopsutil/v4/disk"
	"github.com/shirou/gopsutil/v4/host"
	"github.com/shirou/gopsutil/v4/load"
	"github.com/shirou/gopsutil/v4/mem"
)

// DefaultTimeout bounds one Read. The state directory's statfs is the only
// read that can block (a state dir on a network file system whose server is
// gone); load and memory come from /proc files the kernel answers at once.
const DefaultTimeout = 2 * time.Second

// Facts is the node's context at one time. A fact that could not be read is
// zero and named in Errors.
type Facts struct {
	// Load1, Load5 and Load15 are the load averages.
	Load1  float64 `json:"load1"`
	Load5  float64 `json:"load5"`
	Load15 float64 `json:"load15"`
	// MemTotalBytes and MemAvailableBytes are from /proc/meminfo
	// (MemAvailable: what can be allocated without swapping).
	MemTotalBytes     uint64 `json:"mem_total_bytes"`
	MemAvailableBytes uint64 `json:"mem_available_bytes"`
	// UptimeSeconds is the time since boot.
	UptimeSeconds uint64 `json:"uptime_seconds"`
	// StateDir is the directory whose file system is measured; empty when
	// the Reader has none.
	StateDir string `json:"state_dir,omitempty"`
	// StateDirFreeBytes is what an unprivileged writer may still write
	// there (statfs f_bavail); StateDirSizeBytes is the file system's size.
	StateDirFreeBytes uint64 `json:"state_dir_free_bytes,omitempty"`
	StateDirSizeBytes uint64 `json:"state_dir_size_bytes,omitempty"`
	// Errors lists the facts that could not be read, with why.
	Errors []string `json:"errors,omitempty"`
}

// Options configures a Reader. Zero fields take the defaults.
type Options struct {
	// ProcRoot is the proc file system gopsutil reads (default /proc):
	// tests point it at a fixture tree.
	ProcRoot string
	// StateDir is the directory whose free space is reported; empty: none.
	StateDir string
	// Timeout bounds one Read (DefaultTimeout).
	Timeout time.Duration
}

// Reader reads Facts. It is safe for concurrent use.
type Reader struct {
	o Options
	// busy is set while a read runs: a read that blocked (see Read) is not
	// joined by a second one, so at most one goroutine is ever stuck.
	busy atomic.Bool
}

// NewReader returns a Reader configured by o.
func NewReader(o Options) *Reader {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	return &Reader{o: o}
}

// StateDir returns the directory whose free space Read reports.
func (r *Reader) StateDir() string { return r.o.StateDir }

// Read returns the node's facts. It blocks for at most the Reader's
// timeout (or until ctx ends): a read still outstanding then is reported in
// Errors as blocked and left to finish in the background, and until it
// returns every Read answers at once that it is still blocked.
func (r *Reader) Read(ctx context.Context) Facts {
	if !r.busy.CompareAndSwap(false, true) {
		return Facts{StateDir: r.o.StateDir, Errors: []string{"node facts unreadable: an earlier read is still blocked"}}
	}
	ctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
	defer cancel()
	if r.o.ProcRoot != "" {
		ctx = context.WithValue(ctx, common.EnvKey, common.EnvMap{common.HostProcEnvKey: r.o.ProcRoot})
	}
	done := make(chan Facts, 1)
	go func() {
		defer r.busy.Store(false)
		done <- r.read(context.WithoutCancel(ctx))
	}()
	select {
	case f := <-done:
		return f
	case <-ctx.Done():
		return Facts{StateDir: r.o.StateDir, Errors: []string{fmt.Sprintf("node facts unreadable: blocked for more than %v", r.o.Timeout)}}
	}
}

func (r *Reader) read(ctx context.Context) Facts {
	f := Facts{StateDir: r.o.StateDir}
	fail := func(what string, err error) { f.Errors = append(f.Errors, fmt.Sprintf("%s unreadable: %v", what, err)) }
	if avg, err := load.AvgWithContext(ctx); err != nil {
		fail("load average", err)
	} else {
		f.Load1, f.Load5, f.Load15 = avg.Load1, avg.Load5, avg.Load15
	}
	if vm, err := mem.VirtualMemoryWithContext(ctx); err != nil {
		fail("memory", err)
	} else {
		f.MemTotalBytes, f.MemAvailableBytes = vm.Total, vm.Available
	}
	if up, err := host.UptimeWithContext(ctx); err != nil {
		fail("uptime", err)
	} else {
		f.UptimeSeconds = up
	}
	if r.o.StateDir != "" {
		free, size, err := r.stateDirSpace(ctx)
		if err != nil {
			fail("state dir space", err)
		}
		f.StateDirFreeBytes, f.StateDirSizeBytes = free, size
	}
	return f
}

// stateDirSpace returns the free and total bytes of the state directory's
// file system (gopsutil's disk.Usage, one statfs). It does not bound its
// own time; Read does.
func (r *Reader) stateDirSpace(ctx context.Context) (free, size uint64, err error) {
	u, err := disk.UsageWithContext(ctx, r.o.StateDir)
	if err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", r.o.StateDir, err)
	}
	return u.Free, u.Total, nil
}
