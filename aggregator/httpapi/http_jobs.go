package httpapi

// POST /v1/jobs: a job's registration on its nodes, from the scheduler.

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	agentrequest "github.com/gracewatch/gracewatch/agent/request"
	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/internal/hostlist"
	"github.com/gracewatch/gracewatch/internal/nodename"
)

// MaxJobBodyBytes bounds the body of POST /v1/jobs: a hostlist of a large
// job in its compressed form fits in a few kilobytes.
const MaxJobBodyBytes = 64 << 10

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
