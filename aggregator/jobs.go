package aggregator

// Job registration through the aggregator: the exec system's controller
// tells one aggregator of a job once (Slurm's PrologSlurmctld runs once per
// job, on the controller), and the aggregator hands the job to the agent of
// each of its nodes over the mesh. Slurm gives its node Prolog no end time
// and warns against asking the controller from every node's prolog at
// scale: this is one request to the controller per job, not one per node.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	agentrequest "github.com/gracewatch/gracewatch/agent/request"
	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/internal/hostlist"
	"github.com/gracewatch/gracewatch/internal/nodename"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// MaxJobBodyBytes bounds the body of POST /v1/jobs: a hostlist of a large
// job in its compressed form fits in a few kilobytes.
const MaxJobBodyBytes = 64 << 10

// jobParallel bounds the registrations in flight of one request.
const jobParallel = 64

// decodeJob reads and checks a POST /v1/jobs body; it returns the job's
// nodes, expanded and without duplicates.
func decodeJob(r io.Reader, now time.Time) (api.JobRequest, []string, error) {
	var req api.JobRequest
	if err := decodeStrict(r, &req, `{"job": ..., "nodes": ..., "expiration": ...}`, "job, nodes, expiration, grace"); err != nil {
		return req, nil, err
	}
	if err := agentrequest.CheckRegistration(req.Job, req.Expiration, req.Grace, now); err != nil {
		return req, nil, err
	}
	if strings.TrimSpace(req.Nodes) == "" {
		return req, nil, errors.New("nodes: the job's nodes are required (a hostlist such as node[1-4])")
	}
	names, err := hostlist.Expand(req.Nodes)
	if err != nil {
		return req, nil, fmt.Errorf("nodes: %w", err)
	}
	seen := make(map[string]bool, len(names))
	uniq := names[:0]
	for _, n := range names {
		if err := nodename.Validate(n); err != nil {
			return req, nil, fmt.Errorf("nodes: %w", err)
		}
		if !seen[n] {
			seen[n] = true
			uniq = append(uniq, n)
		}
	}
	return req, uniq, nil
}

// RegisterJobOnNodes hands the job to the agent of each node, at most
// jobParallel at a time, each bounded by Options.ControlTimeout, and
// returns every node's answer. Safe for concurrent use; it blocks.
func (s *Service) RegisterJobOnNodes(ctx context.Context, req api.JobRequest, nodes []string, by string) api.JobResult {
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
			if _, err := s.RegisterJob(ctx, node, reg, by); err != nil {
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
		s.log.Warn("job not registered on every node", "job", logText(req.Job), "registered", res.Registered,
			"failed", res.Failed, "first", failed[0].Node, "err", failed[0].Error)
	} else {
		s.log.Info("job registered", "job", logText(req.Job), "nodes", len(nodes), "expiration", req.Expiration, "by", by)
	}
	return res
}

// handleJobs is POST /v1/jobs: register a job on its nodes' agents.
func (s *Server) handleJobs(w http.ResponseWriter, r *http.Request) {
	req, nodes, err := decodeJob(http.MaxBytesReader(w, r.Body, MaxJobBodyBytes), time.Now())
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.writeError(w, http.StatusRequestEntityTooLarge, "request body larger than %d bytes", MaxJobBodyBytes)
			return
		}
		s.writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	by := fmt.Sprintf("%s (HTTP from %s)", s.svc.Name(), r.RemoteAddr)
	res := s.svc.RegisterJobOnNodes(r.Context(), req, nodes, by)
	if r.Context().Err() != nil {
		return // the client left
	}
	s.writeJSON(w, http.StatusOK, res)
}
