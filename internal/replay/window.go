// Package replay maps a window of a job trace (internal/swf) onto a small
// real cluster with time compressed, draws the teardowns injected into it
// from a seeded model, and computes the figures of a replayed run from
// what was recorded. The e2e harness (e2e/replay_test.go) runs it on a
// real Slurm; this package holds everything that does not need one.
package replay

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gracewatch/gracewatch/internal/swf"
)

// Mapping says how a trace's jobs become jobs of the replayed cluster.
type Mapping struct {
	// Nodes is the replayed cluster's node count; a job asking for more
	// gets all of them (counted in Distortion.NodesCapped).
	Nodes int
	// ProcsPerNode maps processors to nodes: ceil(procs / ProcsPerNode).
	ProcsPerNode int64
	// Compression is trace seconds per real second: submit and run times
	// are divided by it. Time limits are too, then rounded up to whole
	// minutes, Slurm's unit (counted in Distortion).
	Compression float64
	// MaxRun, when above zero, cuts a run time longer than it (in trace
	// time) to it; the time limit stays the one requested, as for any job
	// that ends before its limit (counted in Distortion.RunTrimmed). It
	// lets a window that holds a multi-day job replay in a stated time.
	MaxRun time.Duration
}

// Job is one job to submit: its offset from the window's first submit, its
// node count, the whole minutes of its time limit and how long it runs,
// all in real time.
type Job struct {
	TraceID int64
	Line    int
	Submit  time.Duration
	Nodes   int
	// LimitMinutes is Slurm's -t: ceil(requested time / Compression / 60 s),
	// at least 1.
	LimitMinutes int
	// Run is the trace's run time / Compression, at most the limit.
	Run time.Duration
}

// Distortion counts what the mapping changed beyond dividing times: a
// replay states it beside its figures.
type Distortion struct {
	// Jobs mapped; Skipped are the window's jobs without a run time or a
	// processor count (-1).
	Jobs, Skipped int
	// LimitRaised is the jobs whose limit was raised by rounding up to a
	// whole minute by more than 10 %; LimitRatio the mean ratio of the
	// rounded limit to the compressed one.
	LimitRaised int
	LimitRatio  float64
	// RunCapped is the jobs whose run time was above their limit (cut at
	// the limit); NodesCapped those that asked for more nodes than the
	// cluster has; NoLimit those without a requested time (given their
	// run time, rounded up).
	RunCapped, NodesCapped, NoLimit int
	// RunTrimmed is the jobs whose run time was cut to Mapping.MaxRun.
	RunTrimmed int
}

// Window returns count jobs of the trace from the start-th in submit
// order (ties in the file's order).
func Window(jobs []swf.Job, start, count int) ([]swf.Job, error) {
	if start < 0 || count <= 0 {
		return nil, fmt.Errorf("replay: window from job %d, %d jobs: want start ≥ 0 and count > 0", start, count)
	}
	sorted := slices.Clone(jobs)
	slices.SortStableFunc(sorted, func(a, b swf.Job) int { return int(a.Submit - b.Submit) })
	if start+count > len(sorted) {
		return nil, fmt.Errorf("replay: window from job %d, %d jobs: the trace has %d", start, count, len(sorted))
	}
	return sorted[start : start+count], nil
}

// Map maps a window onto m's cluster.
func Map(window []swf.Job, m Mapping) ([]Job, Distortion, error) {
	var d Distortion
	if m.Nodes <= 0 || m.ProcsPerNode <= 0 || !(m.Compression >= 1) || m.Compression > 1e6 {
		return nil, d, errors.New("replay: a mapping needs nodes > 0, processors per node > 0 and a compression in [1, 1e6]")
	}
	if m.MaxRun < 0 {
		return nil, d, fmt.Errorf("replay: a longest run of %v: want 0 (none) or more", m.MaxRun)
	}
	if len(window) == 0 {
		return nil, d, errors.New("replay: an empty window")
	}
	first := window[0].Submit
	sec := func(s int64) time.Duration { return time.Duration(float64(s) / m.Compression * float64(time.Second)) }
	var jobs []Job
	ratio := 0.0
	for _, w := range window {
		procs := w.Procs
		if procs <= 0 {
			procs = w.ReqProcs
		}
		if w.Run < 0 || procs <= 0 || w.Submit < first {
			d.Skipped++
			continue
		}
		nodes := int((procs + m.ProcsPerNode - 1) / m.ProcsPerNode)
		if nodes > m.Nodes {
			nodes = m.Nodes
			d.NodesCapped++
		}
		req := w.ReqTime
		if req <= 0 {
			req = max(w.Run, 1)
			d.NoLimit++
		}
		compressed := sec(req)
		minutes := max(1, int(math.Ceil(compressed.Minutes()-1e-9)))
		r := float64(minutes) * 60 / compressed.Seconds()
		ratio += r
		if r > 1.1 {
			d.LimitRaised++
		}
		runTrace := w.Run
		if maxRun := int64(m.MaxRun / time.Second); m.MaxRun > 0 && runTrace > maxRun {
			runTrace = maxRun
			d.RunTrimmed++
		}
		run := sec(runTrace)
		if limit := time.Duration(minutes) * time.Minute; run > limit {
			run = limit
			d.RunCapped++
		}
		jobs = append(jobs, Job{TraceID: w.ID, Line: w.Line, Submit: sec(w.Submit - first), Nodes: nodes, LimitMinutes: minutes, Run: run})
	}
	d.Jobs = len(jobs)
	if len(jobs) == 0 {
		return nil, d, errors.New("replay: no job of the window has a run time and a processor count")
	}
	d.LimitRatio = ratio / float64(len(jobs))
	return jobs, d, nil
}
