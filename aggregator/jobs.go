package aggregator

import (
	"context"

	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/jobs"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// RegisterJobOnNodes hands the job to the agent of each node (package
// aggregator/jobs), each bounded by Options.ControlTimeout, and returns
// every node's answer. Safe for concurrent use; it blocks.
func (s *Service) RegisterJobOnNodes(ctx context.Context, req api.JobRequest, nodes []string, by string) api.JobResult {
	return jobs.Register(ctx, req, nodes, by, s.log, func(ctx context.Context, node string, reg *gwpb.JobRegistration, by string) error {
		_, err := s.RegisterJob(ctx, node, reg, by)
		return err
	})
}
