// Package jobs registers a job on its nodes through the aggregator: the
// exec system's controller tells one aggregator of a job once (Slurm's
// PrologSlurmctld runs once per job, on the controller), and the
// aggregator hands the job to the agent of each of its nodes over the
// mesh. Slurm gives its node Prolog no end time and warns against asking
// the controller from every node's prolog at scale: this is one request to
// the controller per job, not one per node.
//
// Register hands the job to each node's agent through the function it is
// given (the Service's, which checks the node and relays the Control); the
// package imports nothing of HTTP or of the Service (TestImports).
package jobs

import (
	"context"
	"log/slog"
	"slices"
	"sync"

	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/nodelog"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// jobParallel bounds the registrations in flight of one request.
const jobParallel = 64

// Register hands the job req to the agent of each node through register
// (which bounds each by its own timeout), at most jobParallel at a time,
// and returns every node's answer; by names who asked. The outcome is
// logged to log, one line. Safe for concurrent use; it blocks.
func Register(ctx context.Context, req api.JobRequest, nodes []string, by string, log *slog.Logger,
	register func(ctx context.Context, node string, reg *gwpb.JobRegistration, by string) error) api.JobResult {
	reg := &gwpb.JobRegistration{Job: req.Job, Expiration: req.Expiration, Grace: req.Grace}
	res := api.JobResult{Job: req.Job, Nodes: make([]api.JobNodeResult, len(nodes))}
	sem := make(chan struct{}, jobParallel)
	var wg sync.WaitGroup
	for i, node := range nodes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			r := api.JobNodeResult{Node: node, OK: true}
			if err := register(ctx, node, reg, by); err != nil {
				r.OK, r.Error = false, err.Error()
			}
			res.Nodes[i] = r
		}()
	}
	wg.Wait()
	for _, r := range res.Nodes {
		if r.OK {
			res.Registered++
		} else {
			res.Failed++
		}
	}
	failed := slices.DeleteFunc(slices.Clone(res.Nodes), func(r api.JobNodeResult) bool { return r.OK })
	if len(failed) > 0 {
		log.Warn("job not registered on every node", "job", nodelog.Text(req.Job), "registered", res.Registered,
			"failed", res.Failed, "first", failed[0].Node, "err", failed[0].Error)
	} else {
		log.Info("job registered", "job", nodelog.Text(req.Job), "nodes", len(nodes), "expiration", req.Expiration, "by", by)
	}
	return res
}
