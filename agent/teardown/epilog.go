package teardown

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gracewatch/gracewatch/agent/request"
)

// tailInterval is how often a running epilogue's output files are read while
// a client is attached. Output goes to files, not pipes, so that an epilogue
// outlives an agent restart without dying of SIGPIPE.
const tailInterval = 50 * time.Millisecond

// epilogRun is what the main loop hands back to RunEpilog.
type epilogRun struct {
	pid int
	// stdout and stderr are the output files opened for reading before the
	// epilogue starts: it may exit, and its job be released (which removes
	// the files), before the caller reads them.
	stdout *os.File
	stderr *os.File
	// kept are the two files as the trimmer keeps them (nil: not bounded).
	kept [2]*outFile
	exit chan int
	// answered is closed when tail returns: the caller has its status (or
	// went away). The reaper waits for it, at most answerWait, before it
	// hands the exit to the main loop.
	answered chan struct{}
}

// answerWait bounds how long the main loop's handling of an epilogue's exit
// waits for the caller to be answered first (a caller that went away, or a
// spawn whose caller never came to tail it).
const answerWait = 20 * time.Millisecond

// RunEpilog runs req.Argv in the job's cgroup (job-<id>/epilog), streams its
// output to out and returns its exit status (128+signal if killed); if ctx
// ends first it returns ctx.Err() and the epilogue goes on under
// supervision.
func (s *Supervisor) RunEpilog(ctx context.Context, id string, req request.EpilogRequest, out request.OutputSink) (int, error) {
	if err := request.ValidateJobID(id); err != nil {
		return 0, err
	}
	if err := request.ValidateEpilog(req); err != nil {
		return 0, err
	}
	dir := req.Dir
	if dir == "" {
		dir = "/"
	}
	path, err := lookPath(req.Argv[0], req.Env)
	if err != nil {
		return 0, &request.InputError{Field: "argv", Msg: err.Error()}
	}
	peer, hasPeer := request.PeerFrom(ctx)
	foreign, err := s.resolveForeign(req.Cgroup)
	if err != nil {
		return 0, err
	}
	req.User = s.checkUser(id, req.User)

	var run *epilogRun
	var opErr error
	err = s.do(ctx, func() {
		run, opErr = s.spawnEpilog(id, path, req, dir, peer, hasPeer, foreign)
		if opErr != nil {
			s.emit(Event{Kind: EventEpilogStartError, Job: id, Err: opErr})
		}
		s.changed()
	})
	if err != nil {
		return 0, err
	}
	if opErr != nil {
		return 0, opErr
	}
	return tail(ctx, run, out)
}

// spawnEpilog runs on the main loop: register or end the job, make the
// cgroup, watch it, start the process inside it and reap it in a goroutine.
func (s *Supervisor) spawnEpilog(id, path string, req request.EpilogRequest, dir string, peer request.Peer, hasPeer bool, foreign Foreign) (*epilogRun, error) {
	now := s.o.Clock.Now()
	j := s.jobs[id]
	if j == nil {
		if n := s.registered(); n >= s.o.MaxJobs {
			return nil, fmt.Errorf("job %s: %w: %d jobs are registered and not released", id, request.ErrFull, n)
		}
		j = &job{ID: id, Expiration: now, Grace: s.o.Grace, Registered: now, Phase: PhaseRunning}
		s.jobs[id] = j
		s.log.Info("job registered by its epilogue", "job", id, "expiration", now, "grace", j.Grace, "user", req.User)
		s.emit(Event{Kind: EventRegistered, Job: id})
	}
	s.setUser(j, req.User)
	if len(req.Argv) > 0 {
		j.EpilogProg = filepath.Base(req.Argv[0])
	}
	if foreign.Path != "" {
		switch {
		case j.Foreign == "":
			s.setForeign(j, foreign)
		case j.Foreign != foreign.Path:
			// The epilogue runs all the same: refusing it would fail the
			// exec system's epilog for a detail.
			s.log.Warn("epilog names another cgroup than the job's; the job's is kept", "job", id,
				"cgroup", j.ForeignName, "epilog_cgroup", foreign.Name)
		}
	}
	switch j.Phase {
	case PhaseRunning:
		s.startTeardown(j, now, endedByEpilog)
	case PhaseOverdue:
		s.endOverdue(j, endedByEpilog)
	case PhaseReleased:
		s.reopen(j)
	}
	if j.Cgroup == "" {
		cg, err := s.o.Cgroups.Create("job-" + j.name())
		if err != nil {
			return nil, fmt.Errorf("job %s: %w", id, err)
		}
		j.Cgroup = cg
		for _, c := range j.cancels {
			c()
		}
		j.cancels = nil
		s.watch(j)
	}
	n := j.Epilogs + 1
	sub := "epilog"
	if n > 1 {
		sub = "epilog-" + strconv.Itoa(n)
	}
	cg, err := s.o.Cgroups.Create(filepath.Join(filepath.Base(j.Cgroup), sub))
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", id, err)
	}
	odir := s.jobOutDir(j)
	if err := os.MkdirAll(odir, 0o700); err != nil {
		return nil, fmt.Errorf("job %s: create output dir: %w", id, err)
	}
	run := &epilogRun{exit: make(chan int, 1), answered: make(chan struct{})}
	var files [2]*os.File // the epilogue's ends
	for i, name := range []string{sub + ".stdout", sub + ".stderr"} {
		p := filepath.Join(odir, name)
		w, err := os.OpenFile(p, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			run.close()
			return nil, fmt.Errorf("job %s: %w", id, err)
		}
		defer w.Close()
		files[i] = w
		r, err := os.Open(p)
		if err != nil {
			run.close()
			return nil, fmt.Errorf("job %s: %w", id, err)
		}
		if run.kept[i], err = s.out.add(p); err != nil {
			// The epilogue runs all the same: its output is not bounded.
			s.log.Warn("cannot bound an epilogue's output", "job", id, "path", p, "err", err)
		}
		if i == 0 {
			run.stdout = r
		} else {
			run.stderr = r
		}
	}
	stdout, stderr := files[0], files[1]

	cmd := &exec.Cmd{
		Path:   path,
		Args:   req.Argv,
		Env:    append(append([]string{}, req.Env...), "GRACEWATCH_JOB_ID="+id),
		Dir:    dir,
		Stdout: stdout,
		Stderr: stderr,
		// A session of its own: the epilogue is not in the agent's process
		// group, so a terminal's ^C or a signal to the agent's group does not
		// reach it.
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	if hasPeer && int(peer.UID) != os.Geteuid() {
		// Run as the peer, never with more rights than the caller has.
		groups := make([]uint32, len(peer.Groups))
		copy(groups, peer.Groups)
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: peer.UID, Gid: peer.GID, Groups: groups}
	}
	if err := s.o.Cgroups.Start(cmd, cg); err != nil {
		run.close()
		return nil, fmt.Errorf("job %s: start epilogue %s: %w", id, path, err)
	}
	pid := cmd.Process.Pid
	run.pid = pid
	j.Epilogs = n
	j.EpilogPIDs = append(j.EpilogPIDs, pid)
	if j.children == nil {
		j.children = make(map[int]chan int)
	}
	j.children[pid] = run.exit
	s.log.Info("epilogue started", "job", id, "pid", pid, "argv", req.Argv, "cgroup", cg)
	s.persist()
	go func() {
		err := cmd.Wait()
		status := exitStatus(cmd, err)
		sig := signaled(cmd)
		// The caller (the exec system's epilog, waiting on the stream) has
		// its status now, not after the loop gets to it: the loop may be
		// writing the state file, and what it does with the exit (a check,
		// a release) does not change the status.
		run.exit <- status
		// The caller first: the loop's work for this exit (a check, a
		// release that removes the cgroups and writes the state file)
		// took the processor the caller's answer waited for, 0.2-0.7 ms
		// of an epilog of /bin/true.
		t := time.NewTimer(answerWait)
		select {
		case <-run.answered:
		case <-t.C:
		}
		t.Stop()
		s.post(func() {
			delete(j.children, pid)
			s.log.Info("epilogue exited", "job", id, "pid", pid, "status", status)
			s.emit(Event{Kind: EventEpilogExited, Job: id, Status: status, Signaled: sig})
			s.check(j)
			s.changed()
		})
	}()
	return run, nil
}

func (r *epilogRun) close() {
	for _, f := range []*os.File{r.stdout, r.stderr} {
		if f != nil {
			f.Close()
		}
	}
}

// exitStatus is the shell's view of how the process ended: its exit code,
// or 128 plus the signal that killed it.
func exitStatus(cmd *exec.Cmd, err error) int {
	if cmd.ProcessState == nil {
		return 127
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return cmd.ProcessState.ExitCode()
}

// signaled reports whether a signal ended the process.
func signaled(cmd *exec.Cmd) bool {
	if cmd.ProcessState == nil {
		return false
	}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled()
}

// tail copies the epilogue's output files to out until it exits, then drains
// them. If ctx ends first (the client went away) the epilogue goes on. A
// client slower than the epilogue by more than the kept tail (see
// output.go) is told how much it missed.
func tail(ctx context.Context, run *epilogRun, out request.OutputSink) (int, error) {
	defer run.close()
	defer close(run.answered)
	buf := make([]byte, 32<<10)
	sinkOK := true
	streams := []struct {
		f     *os.File
		kept  *outFile
		write func([]byte) error
		off   int64
	}{{f: run.stdout, kept: run.kept[0], write: out.Stdout}, {f: run.stderr, kept: run.kept[1], write: out.Stderr}}
	drain := func() {
		for i := range streams {
			p := &streams[i]
			for {
				from, n := p.off, 0
				var err error
				if p.kept != nil {
					from, n, err = p.kept.readAt(p.f, p.off, buf)
				} else {
					n, err = p.f.ReadAt(buf, p.off)
				}
				if from > p.off && sinkOK {
					msg := fmt.Sprintf("\n[gracewatch: %d bytes of this output were dropped: the epilogue wrote faster than they were read]\n", from-p.off)
					if p.write([]byte(msg)) != nil {
						sinkOK = false
					}
				}
				p.off = from + int64(n)
				if n > 0 && sinkOK {
					if p.write(buf[:n]) != nil {
						sinkOK = false
					}
				}
				if n == 0 || err != nil {
					break
				}
			}
		}
	}
	t := time.NewTicker(tailInterval)
	defer t.Stop()
	for {
		drain()
		select {
		case status := <-run.exit:
			drain()
			return status, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-t.C:
		}
	}
}

// lookPath finds file in the PATH of env (the caller's environment, not the
// agent's).
func lookPath(file string, env []string) (string, error) {
	if strings.Contains(file, "/") {
		if err := executable(file); err != nil {
			return "", fmt.Errorf("%s: %w", file, err)
		}
		return file, nil
	}
	pathEnv := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			pathEnv = v
		}
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		p := filepath.Join(d, file)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found in PATH %q", file, pathEnv)
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return errors.New("not an executable file")
	}
	return nil
}
