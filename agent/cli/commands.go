package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/agent/report"
	"github.com/gracewatch/gracewatch/agent/request"
	"github.com/gracewatch/gracewatch/internal/cmdutil"
)

func runServe(c *cli, name string, args []string) int {
	f := c.newFlags(name)
	cfgPath := f.String("config", "", "configuration `file` (default "+defaultConfigPath+" if it exists)")
	socket := f.String("socket", "", "`path` of the API socket (overrides socket)")
	stateDir := f.String("state-dir", "", "state `directory` (overrides state_dir)")
	cgroupRoot := f.String("cgroup-root", "", "cgroup subtree the agent owns (overrides cgroup.root)")
	node := f.String("node", "", "node `name` (overrides node_name)")
	if code, ok := f.ParseN(args, 0, ""); !ok {
		return code
	}
	for flagName, v := range map[string]string{"socket": *socket, "state-dir": *stateDir, "cgroup-root": *cgroupRoot} {
		if v != "" && !filepath.IsAbs(v) {
			return f.UsageErrorf("--%s: %q is not an absolute path", flagName, v)
		}
	}
	if c.daemon == nil {
		return c.execDaemon(append([]string{"serve"}, args...))
	}
	return c.daemon.Serve(ServeOptions{Config: cmdutil.ConfigPath(*cfgPath, defaultConfigPath), Socket: *socket,
		StateDir: *stateDir, CgroupRoot: *cgroupRoot, Node: *node}, c.out())
}

// DaemonPath is where the packages install nodeagentd; nodeagent
// re-executes it for serve and config check unless a nodeagentd stands
// beside nodeagent itself (a build's bin/ folder).
var DaemonPath = "/usr/libexec/gracewatch/nodeagentd"

// daemonName is the daemon binary's file name.
const daemonName = "nodeagentd"

// daemonPath returns the daemon binary to run: nodeagentd beside this
// executable, else DaemonPath. It names every place it looked at when
// none holds it.
func daemonPath() (string, error) {
	var looked []string
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			p := filepath.Join(filepath.Dir(exe), daemonName)
			if isExecutable(p) {
				return p, nil
			}
			looked = append(looked, p)
		}
	}
	if isExecutable(DaemonPath) {
		return DaemonPath, nil
	}
	looked = append(looked, DaemonPath)
	return "", fmt.Errorf("the daemon %s is not installed: looked for %s", daemonName, strings.Join(looked, " and "))
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// execDaemon replaces this process with the daemon binary running args:
// the same process, so systemd's notification socket and a supervisor's
// signals reach the agent. It returns only on failure.
func (c *cli) execDaemon(args []string) int {
	path, err := daemonPath()
	if err != nil {
		return c.fail(err)
	}
	err = syscall.Exec(path, append([]string{path}, args...), os.Environ())
	return c.fail(fmt.Errorf("run %s: %w", path, err))
}

// jobFlags are the flags of job start and job update, parsed and checked:
// the job, its expiration (from --expiration or --R) and its cgroup.
type jobFlags struct {
	id, exp, rFile, cg, user *string
	asJSON                   *bool
	plan                     *planEvents // job start only: --eventlog
}

// newJobFlags declares the flags of a job registration (start: what E and
// the cgroup are; update: what they change to).
func newJobFlags(f *flags, update bool) jobFlags {
	exp, r, cg := "expiration E", "execution.expiration", "the exec system's job cgroup `path` to observe"
	if update {
		exp, r, cg = "the new expiration E", "the new execution.expiration", cg+", for a job registered without one"
	}
	return jobFlags{
		id:     f.String("job", "", "the exec system's job `id` (required)"),
		exp:    f.String("expiration", "", exp+": RFC 3339, Unix `seconds`, or 0 for none"),
		rFile:  f.String("R", "", "Flux R version 1 `file` to take "+r+" from"),
		cg:     f.String("cgroup", "", cg),
		user:   userFlag(f),
		asJSON: f.Bool("json", false, "print the job as JSON"),
	}
}

// userFlag declares --user, the job's user for its reports and the
// cluster's teardown history.
func userFlag(f *flags) *string {
	return f.String("user", "", "the job's `user` (at most 64 bytes of A-Z a-z 0-9 . _ -, an optional trailing $); a bad one is dropped with a warning, never the registration")
}

// checkUserFlag applies the registration's user policy to --user
// (request.CheckUser): a bad user name is said on standard error and
// dropped, and the job registered without it; a teardown supervisor must
// never lose a job over the name it would carry.
func checkUserFlag(c *cli, id, user string) string {
	keep, err := request.CheckUser(user)
	if err != nil {
		fmt.Fprintf(c.stderr, "nodeagent: warning: --user: %s; job %s is registered and supervised without a user name\n", inputMsg(err), id)
	}
	return keep
}

// sayWarnings prints the warnings of the agent's answer on standard error.
func sayWarnings(c *cli, job api.Job) {
	for _, w := range job.Warnings {
		fmt.Fprintf(c.stderr, "nodeagent: warning: %s\n", w)
	}
}

// parse parses args and checks --job and the expiration, which it returns
// as the API takes it ("" when neither --expiration nor --R is given).
func (j jobFlags) parse(c *cli, f *flags, args []string) (string, int, bool) {
	if code, ok := f.ParseN(args, 0, ""); !ok {
		return "", code, false
	}
	if code, ok := checkJobFlag(f, *j.id); !ok {
		return "", code, false
	}
	if j.plan != nil && *j.plan.file != "" {
		return j.plan.expiration(c, f, *j.rFile)
	}
	return expirationFlags(c, f, *j.exp, *j.rFile)
}

func runJobStart(c *cli, name string, args []string) int {
	f := c.newFlags(name)
	jf := newJobFlags(f, false)
	jf.plan = newPlanEvents(f)
	grace := f.String("grace", "", "grace `period` G (default: the agent's)")
	e, code, ok := jf.parse(c, f, args)
	if !ok {
		return code
	}
	if e == "" {
		return f.UsageErrorf("--expiration or --R is required")
	}
	if *grace != "" {
		if _, err := request.ParseGrace(*grace); err != nil {
			return f.UsageErrorf("--grace: %s", inputMsg(err))
		}
	}
	req := request.JobStartRequest{Job: *jf.id, Expiration: e, Grace: *grace, Cgroup: *jf.cg, User: checkUserFlag(c, *jf.id, *jf.user)}
	if jf.plan.ok {
		req.PlanGrace = jf.plan.found.GraceDuration().String()
	}
	return call(c, f, *jf.asJSON, func(ctx context.Context, cl *api.Client) (api.Job, error) {
		job, err := cl.StartJob(ctx, req)
		sayWarnings(c, job)
		if err == nil {
			jf.plan.check(c, job)
		}
		return job, err
	},
		func(w io.Writer, job api.Job) {
			exps := "no expiration"
			if job.Expiration != nil {
				exps = "expires " + formatTime(*job.Expiration)
			}
			fmt.Fprintf(w, "job %s registered: %s, grace %s\n", job.ID, exps, job.Grace)
		})
}

// expirationFlags reads E from --expiration or --R (a Flux R file), as the
// agent's API takes it; "" when neither is given.
func expirationFlags(c *cli, f *flags, exp, rFile string) (string, int, bool) {
	switch {
	case f.IsSet("expiration") && f.IsSet("R"):
		return "", f.UsageErrorf("give one of --expiration and --R, not both"), false
	case f.IsSet("expiration"):
		if _, _, err := request.ParseExpiration(exp, c.now(), 0); err != nil {
			return "", f.UsageErrorf("--expiration: %s", inputMsg(err)), false
		}
		return exp, 0, true
	case f.IsSet("R"):
		data, err := os.ReadFile(rFile)
		if err != nil {
			return "", f.UsageErrorf("--R: %v", err), false
		}
		e, err := request.ParseR(data)
		if err != nil {
			return "", f.UsageErrorf("--R %s: %v", rFile, err), false
		}
		return request.FormatUnix(e), 0, true
	}
	return "", 0, true
}

func runJobUpdate(c *cli, name string, args []string) int {
	f := c.newFlags(name)
	jf := newJobFlags(f, true)
	e, code, ok := jf.parse(c, f, args)
	if !ok {
		return code
	}
	if e == "" && *jf.cg == "" && *jf.user == "" {
		return f.UsageErrorf("give --expiration, --R, --cgroup or --user")
	}
	user := *jf.user
	if e == "" && *jf.cg == "" {
		// Nothing else to change: a bad user is refused, which loses nothing.
		if err := request.ValidateUser(user); err != nil {
			return f.UsageErrorf("--user: %s", inputMsg(err))
		}
	} else {
		user = checkUserFlag(c, *jf.id, user)
	}
	req := request.JobUpdateRequest{Expiration: e, Cgroup: *jf.cg, User: user}
	return call(c, f, *jf.asJSON, func(ctx context.Context, cl *api.Client) (api.Job, error) {
		job, err := cl.UpdateJob(ctx, *jf.id, req)
		sayWarnings(c, job)
		return job, err
	},
		func(w io.Writer, job api.Job) {
			fmt.Fprintf(w, "job %s %s: deadline %s\n", job.ID, job.Phase, deadlineOf(job))
		})
}

func runJobEnd(c *cli, name string, args []string) int {
	f := c.newFlags(name)
	id := f.String("job", "", "the exec system's job `id` (required)")
	asJSON := f.Bool("json", false, "print the job as JSON")
	if code, ok := f.ParseN(args, 0, ""); !ok {
		return code
	}
	if code, ok := checkJobFlag(f, *id); !ok {
		return code
	}
	return call(c, f, *asJSON, func(ctx context.Context, cl *api.Client) (api.Job, error) { return cl.EndJob(ctx, *id) },
		func(w io.Writer, job api.Job) {
			fmt.Fprintf(w, "job %s %s: teardown deadline %s\n", job.ID, job.Phase, deadlineOf(job))
		})
}

// deadlineOf is a job's deadline for people: local time, or "none".
func deadlineOf(job api.Job) string {
	if job.Deadline == nil {
		return "none"
	}
	return formatTime(*job.Deadline)
}

func runEpilog(c *cli, name string, args []string) int {
	f := c.newFlags(name)
	id := f.String("job", "", "the exec system's job `id` (required)")
	timeout := f.Duration("timeout", 0, "give up waiting after this `duration` (exit 124); the agent keeps supervising")
	cg := f.String("cgroup", "", "the exec system's job cgroup `path` to observe, for a job registered without one")
	user := userFlag(f)
	if code, ok := f.Parse(args); !ok {
		return code
	}
	if code, ok := checkJobFlag(f, *id); !ok {
		return code
	}
	if *timeout < 0 {
		return f.UsageErrorf("--timeout: %v is negative", *timeout)
	}
	if len(f.Args()) == 0 {
		return f.UsageErrorf("no command given")
	}
	dir, err := os.Getwd()
	if err != nil {
		dir = "/"
	}
	req := request.EpilogRequest{Argv: f.Args(), Env: os.Environ(), Dir: dir, Cgroup: *cg, User: checkUserFlag(c, *id, *user)}
	if err := request.ValidateEpilog(req); err != nil {
		return f.UsageErrorf("%s", inputMsg(err))
	}
	cl, err := c.client(f)
	if err != nil {
		return c.fail(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if *timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	status, err := cl.Epilog(ctx, *id, req, c.stdout, c.stderr)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		fmt.Fprintf(c.stderr, "nodeagent: epilog for job %s still running after %s; the agent keeps supervising it\n", *id, *timeout)
		return exitTimeout
	case errors.Is(err, api.ErrStreamBroken):
		fmt.Fprintf(c.stderr, "nodeagent: epilog for job %s: %v; its exit status is unknown, the agent keeps supervising it\n", *id, err)
		return exitError
	case err != nil:
		return c.fail(err)
	}
	return status
}

func runStatus(c *cli, name string, args []string) int {
	f := c.newFlags(name)
	asJSON := f.Bool("json", false, "print the status as JSON")
	if code, ok := f.ParseN(args, 0, ""); !ok {
		return code
	}
	return call(c, f, *asJSON, func(ctx context.Context, cl *api.Client) (api.Status, error) { return cl.Status(ctx) },
		func(w io.Writer, st api.Status) { writeStatus(w, st, c.now()) })
}

func runDiagnose(c *cli, name string, args []string) int {
	f := c.newFlags(name)
	id := f.String("job", "", "only this job's `id`")
	asJSON := f.Bool("json", false, "print the reports as JSON")
	if code, ok := f.ParseN(args, 0, ""); !ok {
		return code
	}
	if f.IsSet("job") {
		if code, ok := checkJobFlag(f, *id); !ok {
			return code
		}
	}
	return call(c, f, *asJSON, func(ctx context.Context, cl *api.Client) ([]*report.Report, error) { return cl.Diagnose(ctx, *id) },
		writeReports)
}

func runResume(c *cli, name string, args []string) int {
	f := c.newFlags(name)
	reason := f.String("reason", "", "why the node is resumed (required, logged)")
	asJSON := f.Bool("json", false, "print the status as JSON")
	f.Required = []string{"reason"}
	if code, ok := f.ParseN(args, 0, ""); !ok {
		return code
	}
	if err := request.ValidateReason(*reason); err != nil {
		return f.UsageErrorf("--reason: %s", inputMsg(err))
	}
	req := request.ResumeRequest{Reason: *reason}
	return call(c, f, *asJSON, func(ctx context.Context, cl *api.Client) (api.Status, error) { return cl.Resume(ctx, req) },
		func(w io.Writer, st api.Status) { fmt.Fprintf(w, "node %s resumed: state %s\n", st.Node, st.State) })
}

// runConfigCheck validates a configuration file as serve would (including
// the mesh key file's permissions) and prints the effective configuration,
// defaults filled in, as TOML.
func runConfigCheck(c *cli, name string, args []string) int {
	f := c.newFlags(name)
	cfgPath := f.String("config", "", "configuration `file` (default "+defaultConfigPath+" if it exists)")
	if code, ok := f.ParseN(args, 0, ""); !ok {
		return code
	}
	if c.daemon == nil {
		return c.execDaemon(append([]string{"config", "check"}, args...))
	}
	return c.daemon.ConfigCheck(cmdutil.ConfigPath(*cfgPath, defaultConfigPath), c.out())
}

func runVersion(c *cli, name string, args []string) int {
	if code, ok := c.newFlags(name).ParseN(args, 0, ""); !ok {
		return code
	}
	return c.out().PrintVersion()
}

func runHelp(c *cli, name string, args []string) int { return program.Help(c, c.out(), args) }

// checkJobFlag requires a valid --job.
func checkJobFlag(f *flags, id string) (int, bool) {
	if id == "" {
		return f.UsageErrorf("--job is required"), false
	}
	if err := request.ValidateJobID(id); err != nil {
		return f.UsageErrorf("--job: %s", inputMsg(err)), false
	}
	return 0, true
}

// inputMsg is the message of an *request.InputError without its field, for
// messages that already name the flag.
func inputMsg(err error) string {
	var ie *request.InputError
	if errors.As(err, &ie) {
		return ie.Msg
	}
	return err.Error()
}

// formatTime writes t in the local zone, to the second.
func formatTime(t time.Time) string {
	return t.Local().Format(time.RFC3339)
}
