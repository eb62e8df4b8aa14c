package diagnose

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gracewatch/gracewatch/agent/procfs"
)

// HostFunc returns the node's load, memory, uptime and state dir space. The
// agent reads them through gopsutil (internal/hostinfo.Reader); this
// package does not import it, because the agent's client links this
// package for the report types and must stay free of gopsutil. It must
// return within a bounded time.
type HostFunc func(ctx context.Context) HostFacts

// nodeContext reads what the kernel says about the whole node. The load
// average, memory, uptime and state dir space come through Options.Host
// (gopsutil, in the agent); the rest is read here directly, each with why.
func (s *Snapshotter) nodeContext(ctx context.Context, r *Report) NodeContext {
	nc := NodeContext{HungTaskDelta: -1}
	if s.hungBase >= 0 {
		// Direct: gopsutil has no hung-task count.
		if n, err := readCount(s.hungPath); err == nil {
			nc.HungTaskDelta = n - s.hungBase
		} else {
			r.Errors = append(r.Errors, fmt.Sprintf("hung task count unreadable: %s", procfs.Reason(err)))
		}
	}
	if s.host != nil {
		h := s.host(ctx)
		nc.Host = &h
		nc.LoadAvg = fmt.Sprintf("%.2f %.2f %.2f", h.Load1, h.Load5, h.Load15)
		r.Errors = append(r.Errors, h.Errors...)
	}
	// Direct: gopsutil has no kernel log reader, and /dev/kmsg must be read
	// without blocking (readKernelLines).
	lines, err := readKernelLines(s.kmsgPath, maxKernelLines)
	if err != nil {
		r.Errors = append(r.Errors, fmt.Sprintf("kernel log unreadable: %s", procfs.Reason(err)))
	}
	nc.KernelLines = lines
	nc.FuseCtl = s.fuseCtl(ctx, r)
	return nc
}

// fuseCtl returns where the FUSE control file system is mounted in the
// agent's mount namespace, FuseCtlNotMounted, or "" when mountinfo cannot
// be read. Direct, through the bounded reader: this package is linked by
// the agent's client, which must not link gopsutil (whose disk.Partitions
// would also read init's mountinfo, not the agent's).
func (s *Snapshotter) fuseCtl(ctx context.Context, r *Report) string {
	data, err := s.proc.ReadFile(ctx, "self/mountinfo")
	if err != nil {
		r.Errors = append(r.Errors, procfs.Unreadable("mountinfo", err))
		return ""
	}
	ms, err := procfs.ParseMountinfo(data)
	if err != nil && len(ms) == 0 {
		r.Errors = append(r.Errors, err.Error())
		return ""
	}
	for _, m := range ms {
		if m.FSType == "fusectl" {
			return m.Mountpoint
		}
	}
	return FuseCtlNotMounted
}

// readCount reads a number from a file. Direct: it serves the hung-task
// count of /proc/sys, which gopsutil does not read.
func readCount(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return n, nil
}

// readKernelLines returns the last max lines of the kernel log at path that
// contain "blocked for more than", as "[seconds.micros] message". path is
// /dev/kmsg, read record by record with O_NONBLOCK until EAGAIN (with raw
// system calls: the os package would park a non-blocking character device
// in the poller and wait for more), or a file of such records.
func readKernelLines(path string, max int) ([]string, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var lines []string
	keep := func(rec []byte) {
		for _, line := range bytes.Split(rec, []byte("\n")) {
			if l, ok := kmsgLine(line); ok {
				lines = append(lines, l)
				if len(lines) > max {
					lines = lines[1:]
				}
			}
		}
	}
	buf := make([]byte, 64<<10) // /dev/kmsg needs room for one whole record
	for i := 0; i < maxKmsgRecords; i++ {
		n, err := unix.Read(fd, buf)
		switch {
		case errors.Is(err, unix.EAGAIN):
			return lines, nil
		case errors.Is(err, unix.EPIPE), errors.Is(err, unix.EINTR):
			continue // records overwritten under us: go on with the next
		case err != nil:
			return lines, &fs.PathError{Op: "read", Path: path, Err: err}
		case n == 0:
			return lines, nil
		}
		keep(buf[:n])
	}
	return lines, &fs.PathError{Op: "read", Path: path, Err: io.ErrShortBuffer}
}

// kmsgLine turns a /dev/kmsg record ("6,1234,5678901,-;INFO: task cat:77
// blocked for more than 122 seconds.") into "[5.678901] INFO: ...", if it is
// a hung-task line.
func kmsgLine(line []byte) (string, bool) {
	if !bytes.Contains(line, []byte("blocked for more than")) || len(line) == 0 || line[0] == ' ' {
		return "", false
	}
	head, msg, ok := bytes.Cut(line, []byte(";"))
	if !ok {
		return string(line), true
	}
	f := strings.Split(string(head), ",")
	if len(f) < 3 {
		return string(msg), true
	}
	us, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil {
		return string(msg), true
	}
	return fmt.Sprintf("[%d.%06d] %s", us/1e6, us%1e6, msg), true
}
