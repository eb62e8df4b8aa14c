package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/agent/request"
	"github.com/gracewatch/gracewatch/internal/cmdutil"
	"github.com/gracewatch/gracewatch/internal/version"
)

func runServe(c *cli, name string, args []string) int {
	f := newFlags(name)
	cfgPath := f.String("config", "", "configuration `file` (default "+defaultConfigPath+" if it exists)")
	socket := f.String("socket", "", "`path` of the API socket (overrides socket)")
	stateDir := f.String("state-dir", "", "state `directory` (overrides state_dir)")
	cgroupRoot := f.String("cgroup-root", "", "cgroup subtree the agent owns (overrides cgroup.root)")
	node := f.String("node", "", "node `name` (overrides node_name)")
	if code, ok := f.parse(c, args); !ok {
		return code
	}
	if code, ok := f.noArgs(c); !ok {
		return code
	}
	for flagName, v := range map[string]string{"socket": *socket, "state-dir": *stateDir, "cgroup-root": *cgroupRoot} {
		if v != "" && !filepath.IsAbs(v) {
			return c.usageError(f, "--%s: %q is not an absolute path", flagName, v)
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

func runJobStart(c *cli, name string, args []string) int {
	f := newFlags(name)
	id := f.String("job", "", "the exec system's job `id` (required)")
	exp := f.String("expiration", "", "expiration E: RFC 3339, Unix `seconds`, or 0 for none")
	rFile := f.String("R", "", "Flux R version 1 `file` to take execution.expiration from")
	grace := f.String("grace", "", "grace `period` G (default: the agent's)")
	cg := f.String("cgroup", "", "the exec system's job cgroup `path` to observe")
	asJSON := f.Bool("json", false, "print the job as JSON")
	if code, ok := f.parse(c, args); !ok {
		return code
	}
	if code, ok := f.noArgs(c); !ok {
		return code
	}
	if code, ok := checkJobFlag(c, f, *id); !ok {
		return code
	}
	req := request.JobStartRequest{Job: *id, Grace: *grace, Cgroup: *cg}
	e, code, ok := expirationFlags(c, f, *exp, *rFile)
	if !ok {
		return code
	}
	if e == "" {
		return c.usageError(f, "--expiration or --R is required")
	}
	req.Expiration = e
	if *grace != "" {
		if _, err := request.ParseGrace(*grace); err != nil {
			return c.usageError(f, "--grace: %s", inputMsg(err))
		}
	}
	cl, err := c.client(f)
	if err != nil {
		return c.fail(err)
	}
	defer cl.Close()
	ctx, cancel := c.ctx()
	defer cancel()
	job, err := cl.StartJob(ctx, req)
	if err != nil {
		return c.fail(err)
	}
	if *asJSON {
		return c.printJSON(job)
	}
	exps := "no expiration"
	if job.Expiration != nil {
		exps = "expires " + formatTime(*job.Expiration)
	}
	fmt.Fprintf(c.stdout, "job %s registered: %s, grace %s\n", job.ID, exps, job.Grace)
	return exitOK
}

// expirationFlags reads E from --expiration or --R (a Flux R file), as the
// agent's API takes it; "" when neither is given.
func expirationFlags(c *cli, f *flags, exp, rFile string) (string, int, bool) {
	switch {
	case f.isSet("expiration") && f.isSet("R"):
		return "", c.usageError(f, "give one of --expiration and --R, not both"), false
	case f.isSet("expiration"):
		if _, _, err := request.ParseExpiration(exp, c.now(), 0); err != nil {
			return "", c.usageError(f, "--expiration: %s", inputMsg(err)), false
		}
		return exp, 0, true
	case f.isSet("R"):
		data, err := os.ReadFile(rFile)
		if err != nil {
			return "", c.usageError(f, "--R: %v", err), false
		}
		e, err := request.ParseR(data)
		if err != nil {
			return "", c.usageError(f, "--R %s: %v", rFile, err), false
		}
		return request.FormatUnix(e), 0, true
	}
	return "", 0, true
}

func runJobUpdate(c *cli, name string, args []string) int {
	f := newFlags(name)
	id := f.String("job", "", "the exec system's job `id` (required)")
	exp := f.String("expiration", "", "the new expiration E: RFC 3339, Unix `seconds`, or 0 for none")
	rFile := f.String("R", "", "Flux R version 1 `file` to take the new execution.expiration from")
	cg := f.String("cgroup", "", "the exec system's job cgroup `path` to observe, for a job registered without one")
	asJSON := f.Bool("json", false, "print the job as JSON")
	if code, ok := f.parse(c, args); !ok {
		return code
	}
	if code, ok := f.noArgs(c); !ok {
		return code
	}
	if code, ok := checkJobFlag(c, f, *id); !ok {
		return code
	}
	e, code, ok := expirationFlags(c, f, *exp, *rFile)
	if !ok {
		return code
	}
	if e == "" && *cg == "" {
		return c.usageError(f, "give --expiration, --R or --cgroup")
	}
	cl, err := c.client(f)
	if err != nil {
		return c.fail(err)
	}
	defer cl.Close()
	ctx, cancel := c.ctx()
	defer cancel()
	job, err := cl.UpdateJob(ctx, *id, request.JobUpdateRequest{Expiration: e, Cgroup: *cg})
	if err != nil {
		return c.fail(err)
	}
	if *asJSON {
		return c.printJSON(job)
	}
	deadline := "none"
	if job.Deadline != nil {
		deadline = formatTime(*job.Deadline)
	}
	fmt.Fprintf(c.stdout, "job %s %s: deadline %s\n", job.ID, job.Phase, deadline)
	return exitOK
}

func runJobEnd(c *cli, name string, args []string) int {
	f := newFlags(name)
	id := f.String("job", "", "the exec system's job `id` (required)")
	asJSON := f.Bool("json", false, "print the job as JSON")
	if code, ok := f.parse(c, args); !ok {
		return code
	}
	if code, ok := f.noArgs(c); !ok {
		return code
	}
	if code, ok := checkJobFlag(c, f, *id); !ok {
		return code
	}
	cl, err := c.client(f)
	if err != nil {
		return c.fail(err)
	}
	defer cl.Close()
	ctx, cancel := c.ctx()
	defer cancel()
	job, err := cl.EndJob(ctx, *id)
	if err != nil {
		return c.fail(err)
	}
	if *asJSON {
		return c.printJSON(job)
	}
	deadline := "none"
	if job.Deadline != nil {
		deadline = formatTime(*job.Deadline)
	}
	fmt.Fprintf(c.stdout, "job %s %s: teardown deadline %s\n", job.ID, job.Phase, deadline)
	return exitOK
}

func runEpilog(c *cli, name string, args []string) int {
	f := newFlags(name)
	id := f.String("job", "", "the exec system's job `id` (required)")
	timeout := f.Duration("timeout", 0, "give up waiting after this `duration` (exit 124); the agent keeps supervising")
	cg := f.String("cgroup", "", "the exec system's job cgroup `path` to observe, for a job registered without one")
	if code, ok := f.parse(c, args); !ok {
		return code
	}
	if code, ok := checkJobFlag(c, f, *id); !ok {
		return code
	}
	if *timeout < 0 {
		return c.usageError(f, "--timeout: %v is negative", *timeout)
	}
	if f.NArg() == 0 {
		return c.usageError(f, "no command given")
	}
	dir, err := os.Getwd()
	if err != nil {
		dir = "/"
	}
	req := request.EpilogRequest{Argv: f.Args(), Env: os.Environ(), Dir: dir, Cgroup: *cg}
	if err := request.ValidateEpilog(req); err != nil {
		return c.usageError(f, "%s", inputMsg(err))
	}
	cl, err := c.client(f)
	if err != nil {
		return c.fail(err)
	}
	defer cl.Close()
	ctx, cancel := c.ctx()
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
	f := newFlags(name)
	asJSON := f.Bool("json", false, "print the status as JSON")
	if code, ok := f.parse(c, args); !ok {
		return code
	}
	if code, ok := f.noArgs(c); !ok {
		return code
	}
	cl, err := c.client(f)
	if err != nil {
		return c.fail(err)
	}
	defer cl.Close()
	ctx, cancel := c.ctx()
	defer cancel()
	st, err := cl.Status(ctx)
	if err != nil {
		return c.fail(err)
	}
	if *asJSON {
		return c.printJSON(st)
	}
	writeStatus(c.stdout, st, c.now())
	return exitOK
}

func runDiagnose(c *cli, name string, args []string) int {
	f := newFlags(name)
	id := f.String("job", "", "only this job's `id`")
	asJSON := f.Bool("json", false, "print the reports as JSON")
	if code, ok := f.parse(c, args); !ok {
		return code
	}
	if code, ok := f.noArgs(c); !ok {
		return code
	}
	if f.isSet("job") {
		if code, ok := checkJobFlag(c, f, *id); !ok {
			return code
		}
	}
	cl, err := c.client(f)
	if err != nil {
		return c.fail(err)
	}
	defer cl.Close()
	ctx, cancel := c.ctx()
	defer cancel()
	reports, err := cl.Diagnose(ctx, *id)
	if err != nil {
		return c.fail(err)
	}
	if *asJSON {
		return c.printJSON(reports)
	}
	writeReports(c.stdout, reports)
	return exitOK
}

func runResume(c *cli, name string, args []string) int {
	f := newFlags(name)
	reason := f.String("reason", "", "why the node is resumed (required, logged)")
	asJSON := f.Bool("json", false, "print the status as JSON")
	if code, ok := f.parse(c, args); !ok {
		return code
	}
	if code, ok := f.noArgs(c); !ok {
		return code
	}
	if !f.isSet("reason") {
		return c.usageError(f, "--reason is required")
	}
	if err := request.ValidateReason(*reason); err != nil {
		return c.usageError(f, "--reason: %s", inputMsg(err))
	}
	cl, err := c.client(f)
	if err != nil {
		return c.fail(err)
	}
	defer cl.Close()
	ctx, cancel := c.ctx()
	defer cancel()
	st, err := cl.Resume(ctx, request.ResumeRequest{Reason: *reason})
	if err != nil {
		return c.fail(err)
	}
	if *asJSON {
		return c.printJSON(st)
	}
	fmt.Fprintf(c.stdout, "node %s resumed: state %s\n", st.Node, st.State)
	return exitOK
}

// runConfigCheck validates a configuration file as serve would (including
// the mesh key file's permissions) and prints the effective configuration,
// defaults filled in, as TOML.
func runConfigCheck(c *cli, name string, args []string) int {
	f := newFlags(name)
	cfgPath := f.String("config", "", "configuration `file` (default "+defaultConfigPath+" if it exists)")
	if code, ok := f.parse(c, args); !ok {
		return code
	}
	if code, ok := f.noArgs(c); !ok {
		return code
	}
	if c.daemon == nil {
		return c.execDaemon(append([]string{"config", "check"}, args...))
	}
	return c.daemon.ConfigCheck(cmdutil.ConfigPath(*cfgPath, defaultConfigPath), c.out())
}

func runVersion(c *cli, name string, args []string) int {
	f := newFlags(name)
	if code, ok := f.parse(c, args); !ok {
		return code
	}
	if code, ok := f.noArgs(c); !ok {
		return code
	}
	fmt.Fprintf(c.stdout, "nodeagent %s (%s, %s/%s)\n", version.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return exitOK
}

func runHelp(c *cli, name string, args []string) int {
	if len(args) == 0 {
		usage(c.stdout)
		return exitOK
	}
	cmd, rest := findCommand(args)
	if cmd == nil || len(rest) > 0 {
		fmt.Fprintf(c.stderr, "nodeagent help: unknown command %q\n", joinArgs(args))
		usage(c.stderr)
		return exitUsage
	}
	if cmd.name == "help" {
		commandUsage(c.stdout, cmd, nil)
		return exitOK
	}
	// The command builds its flag set and prints its help.
	return cmd.run(c, cmd.name, []string{"-h"})
}

func joinArgs(args []string) string { return strings.Join(args, " ") }

// checkJobFlag requires a valid --job.
func checkJobFlag(c *cli, f *flags, id string) (int, bool) {
	if id == "" {
		return c.usageError(f, "--job is required"), false
	}
	if err := request.ValidateJobID(id); err != nil {
		return c.usageError(f, "--job: %s", inputMsg(err)), false
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

func (c *cli) printJSON(v any) int { return c.out().PrintJSON(v) }

// formatTime writes t in the local zone, to the second.
func formatTime(t time.Time) string {
	return t.Local().Format(time.RFC3339)
}
