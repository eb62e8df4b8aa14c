package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/agent/report"
)

// writeStatus prints the node's state for people.
func writeStatus(w io.Writer, st api.Status, now time.Time) {
	fmt.Fprintf(w, "node:     %s\n", st.Node)
	fmt.Fprintf(w, "state:    %s\n", st.State)
	fmt.Fprintf(w, "reason:   %s\n", orDash(st.Reason))
	if e := st.StateFile; e != nil {
		fmt.Fprintf(w, "WARNING:  state file %s not written since %s (%s, %d failures): %s; a restart of the agent would lose every change since\n",
			e.Path, formatTime(e.Since), relative(e.Since, now), e.Failures, e.Error)
	}
	if st.Since.IsZero() {
		fmt.Fprintf(w, "since:    -\n")
	} else {
		fmt.Fprintf(w, "since:    %s (%s)\n", formatTime(st.Since), relative(st.Since, now))
	}
	if st.FreeAt == nil {
		fmt.Fprintf(w, "free_at:  -\n")
	} else {
		fmt.Fprintf(w, "free_at:  %s (%s)\n", formatTime(*st.FreeAt), relative(*st.FreeAt, now))
	}
	if len(st.Jobs) == 0 {
		fmt.Fprintln(w, "\njobs:     none")
	} else {
		fmt.Fprintln(w, "\njobs:")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  JOB\tUSER\tPHASE\tEXPIRATION\tGRACE\tDEADLINE\tEPILOGS\tESCALATION\tOUTCOME")
		for _, j := range st.Jobs {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", j.ID, orDash(j.User), j.Phase, timeOrDash(j.Expiration, "none"),
				orDash(j.Grace), timeOrDash(j.Deadline, "-"), j.Epilogs, orDash(j.Escalation), orDash(j.Outcome))
		}
		tw.Flush()
		for _, j := range st.Jobs {
			if j.ForeignName != "" && j.Phase != api.PhaseReleased {
				procs := "no process"
				if len(j.Processes) > 0 {
					procs = fmt.Sprintf("pids %s", joinInts(j.Processes))
				}
				fmt.Fprintf(w, "  job %s observes cgroup %s: %s\n", j.ID, j.ForeignName, procs)
			}
		}
	}
	if len(st.Hung) > 0 {
		fmt.Fprintln(w, "\nhung processes:")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  JOB\tPID\tCOMM\tCLASS\tSTATE\tWCHAN")
		for _, h := range st.Hung {
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\t%s\n", h.Job, h.PID, h.Comm, h.Class, orDash(h.State), orDash(h.Wchan))
		}
		tw.Flush()
	}
}

// writeReports prints diagnostics reports for people: the summary and
// suggestions first, then one line per process.
func writeReports(w io.Writer, reports []*report.Report) {
	if len(reports) == 0 {
		fmt.Fprintln(w, "no diagnostics reports")
		return
	}
	for i, r := range reports {
		if r == nil {
			continue
		}
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "job %s on %s: %s report taken %s\n", r.Job, r.Node, r.Stage, formatTime(r.Taken))
		if r.User != "" {
			fmt.Fprintf(w, "  user:       %s\n", r.User)
		}
		if r.History {
			gone := "-"
			if r.Timeline.Released != nil {
				gone = formatTime(*r.Timeline.Released)
			}
			fmt.Fprintf(w, "  history:    the teardown has ended, its processes gone since %s; this is what was true when it was taken\n", gone)
		}
		fmt.Fprintf(w, "  summary:    %s\n", orDash(r.Summary))
		fmt.Fprintf(w, "  outcome:    %s (grace %s, deadline %s)\n", orDash(r.Outcome), orDash(r.Grace), formatTime(r.Timeline.Deadline))
		for _, s := range r.Suggestions {
			fmt.Fprintf(w, "  suggestion: %s\n", s)
		}
		for _, p := range r.Processes {
			fmt.Fprintf(w, "  pid %d (%s): %s, state %s", p.PID, p.Comm, orDash(string(p.Class)), orDash(p.State))
			if p.Wchan != "" {
				fmt.Fprintf(w, " in %s", p.Wchan)
			}
			if p.SecondsInD > 0 {
				fmt.Fprintf(w, " for %.0fs", p.SecondsInD)
			}
			fmt.Fprintf(w, ", %d threads", p.NumThreads)
			if len(p.Cmdline) > 0 {
				fmt.Fprintf(w, ": %s", strings.Join(p.Cmdline, " "))
			}
			fmt.Fprintln(w)
			for _, f := range p.Files {
				if f.FSType == "" {
					continue
				}
				fmt.Fprintf(w, "      %s -> %s (%s %s)\n", f.FD, f.Target, f.FSType, f.Mountpoint)
			}
			for _, e := range p.Errors {
				fmt.Fprintf(w, "      error: %s\n", e)
			}
		}
		if h := r.NodeContext.Host; h != nil {
			fmt.Fprintf(w, "  node:       %s\n", hostLine(*h))
		}
		if hc := r.NodeContext; hc.HungTaskDelta > 0 || len(hc.KernelLines) > 0 {
			fmt.Fprintf(w, "  kernel:     %d hung-task reports since the agent started\n", hc.HungTaskDelta)
			for _, l := range hc.KernelLines {
				fmt.Fprintf(w, "      %s\n", l)
			}
		}
		for _, e := range r.Errors {
			fmt.Fprintf(w, "  error:      %s\n", e)
		}
	}
}

// hostLine is the node's context in a report for people: "load 3.50 2.25
// 1.00, memory 20.0 GiB available of 24.0 GiB, up 1d1h0m0s, state dir 10.0
// GiB free of 100.0 GiB".
func hostLine(h report.HostFacts) string {
	parts := []string{fmt.Sprintf("load %.2f %.2f %.2f", h.Load1, h.Load5, h.Load15)}
	if h.MemTotalBytes > 0 {
		parts = append(parts, fmt.Sprintf("memory %s available of %s", gib(h.MemAvailableBytes), gib(h.MemTotalBytes)))
	}
	if h.UptimeSeconds > 0 {
		up := time.Duration(h.UptimeSeconds) * time.Second
		parts = append(parts, fmt.Sprintf("up %dd%s", int(up.Hours())/24, (up%(24*time.Hour)).String()))
	}
	if h.StateDirSizeBytes > 0 {
		parts = append(parts, fmt.Sprintf("state dir %s free of %s", gib(h.StateDirFreeBytes), gib(h.StateDirSizeBytes)))
	}
	return strings.Join(parts, ", ")
}

func gib(b uint64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func timeOrDash(t *time.Time, none string) string {
	if t == nil {
		return none
	}
	return formatTime(*t)
}

// relative says how far t is from now ("3m ago", "in 1m30s").
func relative(t, now time.Time) string {
	d := t.Sub(now).Round(time.Second)
	switch {
	case d > 0:
		return "in " + d.String()
	case d < 0:
		return (-d).String() + " ago"
	}
	return "now"
}

// joinInts writes pids as "12 13 14".
func joinInts(n []int) string {
	s := make([]string, len(n))
	for i, v := range n {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, " ")
}
