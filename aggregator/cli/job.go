package cli

import (
	"context"
	"fmt"

	"github.com/gracewatch/gracewatch/agent/request"
	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/internal/hostlist"
)

// runJob is `aggregator job start`: POST /v1/jobs. It exits 0 when every
// node's agent registered the job, 1 when one did not (each is named on
// standard error), 2 on a usage error.
func runJob(c *cli, name string, args []string) int {
	f := c.newFlags(name)
	job := f.String("job", "", "the exec system's job `id` (required)")
	nodes := f.String("nodes", "", "the job's nodes as a `hostlist`, e.g. node[1-4] (required)")
	exp := f.String("expiration", "", "expiration E: RFC 3339, Unix `seconds`, or 0 for none (required)")
	grace := f.String("grace", "", "the job's own grace `period` G (default: each agent's)")
	asJSON := f.Bool("json", false, "print the result as JSON")
	if code, ok := f.ParseN(args, 1, "start"); !ok {
		return code
	}
	if f.Args()[0] != "start" {
		return f.UsageErrorf("unknown job subcommand %q (want start)", f.Args()[0])
	}
	switch {
	case *job == "":
		return f.UsageErrorf("--job is required")
	case *nodes == "":
		return f.UsageErrorf("--nodes is required")
	case !f.IsSet("expiration"):
		return f.UsageErrorf("--expiration is required")
	}
	if err := request.ValidateJobID(*job); err != nil {
		return f.UsageErrorf("--job: %v", err)
	}
	if _, err := hostlist.Expand(*nodes); err != nil {
		return f.UsageErrorf("--nodes: %v", err)
	}
	cl, err := c.client(f, true)
	if err != nil {
		return c.fail(err)
	}
	res, err := cl.RegisterJob(context.Background(), api.JobRequest{Job: *job, Nodes: *nodes, Expiration: *exp, Grace: *grace})
	if err != nil {
		return c.fail(err)
	}
	if *asJSON {
		c.out().PrintJSON(res)
	} else {
		fmt.Fprintf(c.stdout, "job %s registered on %d of %d nodes\n", res.Job, res.Registered, len(res.Nodes))
	}
	for _, r := range res.Nodes {
		if !r.OK {
			fmt.Fprintf(c.stderr, "aggregator: job %s not registered on %s: %s\n", res.Job, r.Node, r.Error)
		}
	}
	if res.Failed > 0 {
		return exitError
	}
	return exitOK
}
