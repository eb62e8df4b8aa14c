package diagnose

import (
	wire "github.com/gracewatch/gracewatch/agent/report"
)

// Cause is the report's cause (agent/report.Cause).
type Cause = wire.Cause

// CauseOf derives what r's processes wait on, for the aggregators'
// incidents: among the processes of the worst class, the file system that
// the first of them (by pid) holding a network or FUSE file open has (the
// suspect file that Summarize names), else the worst process's wait channel
// (which is set in either case, for the example). Counts are the processes by class; the example is the worst process. A
// report without a process gives the empty Cause. Every field is within
// agent/report's bounds: an over-long file system (a mountpoint past 256
// bytes) is not named at all rather than cut, so that two file systems never
// share a cut name; other fields are cleaned (report.CleanField).
func CauseOf(r *Report) Cause {
	if r == nil || len(r.Processes) == 0 {
		return Cause{}
	}
	procs := worstFirst(r.Processes)
	worst := procs[0]
	c := Cause{
		Class:       wire.Class(wire.CleanField(string(worst.Class), wire.MaxCauseClass)),
		Counts:      map[Class]int{},
		ExamplePID:  max(worst.PID, 0),
		ExampleComm: wire.CleanField(worst.Comm, wire.MaxCauseComm),
		Job:         wire.CleanField(r.Job, wire.MaxCauseJob),
	}
	if c.Class.Severity() == 0 {
		c.Class = ""
	}
	for _, p := range procs {
		if p.Class.Severity() > 0 {
			c.Counts[p.Class]++
		}
	}
	for _, p := range procs {
		if p.Class != worst.Class {
			break
		}
		f, ok := suspectFile(p)
		if !ok || !fits(f) {
			continue
		}
		c.FSType, c.Source, c.Mountpoint = f.FSType, f.Source, f.Mountpoint
		break
	}
	c.Wchan = wire.CleanField(worst.Wchan, wire.MaxCauseWchan)
	return c
}

// fits reports whether f's file system fits a Cause as it is: within the
// bounds and printable.
func fits(f File) bool {
	c := Cause{FSType: f.FSType, Source: f.Source, Mountpoint: f.Mountpoint}
	return f.FSType != "" && c.Check() == nil
}
