// Package swf reads job traces in the Standard Workload Format of the
// Parallel Workloads Archive (Feitelson et al.): one job a line, 18
// whitespace-separated integer fields, -1 where unknown; lines starting
// with ';' are the header. A trace is input from outside: every line, field
// and count is bounded, and an error names the line it was found on.
package swf

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Fields is the number of fields of a job line.
const Fields = 18

// Bounds of a trace: MaxLine is the longest line read (18 fields of 20
// digits and their separators fit in a tenth of it), MaxJobs the default
// number of jobs Read keeps.
const (
	MaxLine = 4096
	MaxJobs = 1_000_000
)

// ErrTooManyJobs is returned when a trace holds more jobs than the limit.
var ErrTooManyJobs = errors.New("too many jobs")

// Job is one line of a trace, the fields a replay uses. Times are in
// seconds; -1 is unknown, as in the file.
type Job struct {
	// Line is the job's line number in the file (from 1).
	Line int
	// ID is field 1, the job number.
	ID int64
	// Submit is field 2, the submit time from the trace's start.
	Submit int64
	// Wait is field 3, the wait in the queue at the site.
	Wait int64
	// Run is field 4, the run time.
	Run int64
	// Procs is field 5, the processors allocated.
	Procs int64
	// ReqProcs is field 8, the processors requested.
	ReqProcs int64
	// ReqTime is field 9, the requested time: the time limit the
	// scheduler plans with.
	ReqTime int64
	// Status is field 11 (1 completed, 0 failed, 5 cancelled...).
	Status int64
}

// fieldNames name the fields of a line in errors (SWF's own names).
var fieldNames = [Fields]string{"job number", "submit time", "wait time", "run time", "allocated processors",
	"average CPU time", "used memory", "requested processors", "requested time", "requested memory", "status",
	"user", "group", "executable", "queue", "partition", "preceding job", "think time"}

// Read reads the jobs of a trace, at most limit of them (MaxJobs if limit
// is not positive), in the file's order. A line that is not a job (a
// field missing, extra, not an integer, or a time or count below -1) is an
// error naming its line number; so is a line longer than MaxLine.
func Read(r io.Reader, limit int) ([]Job, error) {
	if limit <= 0 {
		limit = MaxJobs
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 512), MaxLine)
	var jobs []Job
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, ";") {
			continue
		}
		if len(jobs) == limit {
			return nil, fmt.Errorf("swf: line %d: %w (limit %d)", line, ErrTooManyJobs, limit)
		}
		j, err := parseLine(text)
		if err != nil {
			return nil, fmt.Errorf("swf: line %d: %w", line, err)
		}
		j.Line = line
		jobs = append(jobs, j)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("swf: line %d: longer than %d bytes", line+1, MaxLine)
		}
		return nil, fmt.Errorf("swf: after line %d: %w", line, err)
	}
	return jobs, nil
}

func parseLine(text string) (Job, error) {
	f := strings.Fields(text)
	if len(f) != Fields {
		return Job{}, fmt.Errorf("%d fields, want %d", len(f), Fields)
	}
	var v [Fields]int64
	for i, s := range f {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			// Some archives write -1 as "-1.0" or averages with a
			// fraction: accepted where the fraction is zero.
			x, ferr := strconv.ParseFloat(s, 64)
			if ferr != nil || x != float64(int64(x)) || x > 1<<53 || x < -1<<53 {
				return Job{}, fmt.Errorf("field %d (%s): %q is not an integer", i+1, fieldNames[i], s)
			}
			n = int64(x)
		}
		if n < -1 {
			return Job{}, fmt.Errorf("field %d (%s): %d is below -1", i+1, fieldNames[i], n)
		}
		v[i] = n
	}
	return Job{ID: v[0], Submit: v[1], Wait: v[2], Run: v[3], Procs: v[4], ReqProcs: v[7], ReqTime: v[8], Status: v[10]}, nil
}
