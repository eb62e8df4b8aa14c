package cli

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/agent/request"
)

// planEvents is job start's --eventlog: a Flux job's eventlog, read with
// its R (--R) when the scheduler plans with G added by the gracewatch
// jobtap plugin (flux/jobtap/gracewatch.c). E is then the user's own
// expiration, min(starttime + T, R's expiration), not the scheduler's
// E + G (which would make D = E + 2G); and the plugin's G is checked
// against the agent's. The record is the one the plugin's jobspec-update
// events carry (request.ParsePlanGrace), not what the user submitted.
type planEvents struct {
	file *string
	// found is the plugin's record, once --eventlog is read (ok false:
	// none, the job is registered with R's expiration as it is).
	found request.PlanGrace
	ok    bool
}

func newPlanEvents(f *flags) *planEvents {
	return &planEvents{file: f.String("eventlog", "",
		"Flux job eventlog `file` (with --R): E is the user's own limit when the gracewatch jobtap plugin added G to the scheduler's, and its G is checked against the agent's")}
}

// expiration reads --R and --eventlog and returns E as the API takes it.
func (p *planEvents) expiration(c *cli, f *flags, rFile string) (string, int, bool) {
	if !f.IsSet("R") || f.IsSet("expiration") {
		return "", f.UsageErrorf("--eventlog goes with --R (and not --expiration)"), false
	}
	log, err := readBounded(*p.file, request.MaxEventlog)
	if err != nil {
		return "", f.UsageErrorf("--eventlog: %v", err), false
	}
	r, err := readBounded(rFile, request.MaxEventlog)
	if err != nil {
		return "", f.UsageErrorf("--R: %v", err), false
	}
	if p.found, p.ok, err = request.ParsePlanGrace(log); err != nil {
		// The eventlog is Flux's business: a bad one must not lose the
		// registration; R's expiration is used as it is.
		fmt.Fprintf(c.stderr, "nodeagent: warning: --eventlog %s: %s; E taken from R as it is\n", *p.file, inputMsg(err))
		p.ok = false
	}
	var e float64
	if p.ok {
		e, err = request.UserExpiration(r, p.found)
	} else {
		e, err = request.ParseR(r)
	}
	if err != nil {
		return "", f.UsageErrorf("--R %s: %v", rFile, err), false
	}
	return request.FormatUnix(e), 0, true
}

// check says on standard error, in one line that Flux's log keeps (the
// prolog's), when the scheduler plans with another G than the agent's:
// the node would be drained at another time than the plan says it is
// free.
func (p *planEvents) check(c *cli, job api.Job) {
	if p == nil || !p.ok {
		return
	}
	agent, err := time.ParseDuration(job.Grace)
	if err != nil {
		return
	}
	plan := p.found.GraceDuration()
	if d := plan - agent; d > -time.Millisecond && d < time.Millisecond {
		return
	}
	fmt.Fprintf(c.stderr, "nodeagent: warning: job %s: grace mismatch: the scheduler plans with grace %s (the gracewatch jobtap plugin's jobspec-update, attributes.system.gracewatch), this node's agent has grace %s: set one G in both ([gracewatch] grace of Flux, [teardown] grace of the agent)\n",
		job.ID, plan, agent)
}

// readBounded reads path (/dev/stdin too), refusing one of more than
// limit bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: longer than %d bytes", path, limit)
	}
	return data, nil
}
