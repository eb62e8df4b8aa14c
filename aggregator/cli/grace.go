package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/api"
)

// runGrace ("grace") asks the grace advisor (GET /v1/grace).
func runGrace(c *cli, name string, args []string) int {
	f := c.newFlags(name)
	from := f.String("from", "", "`when` the window starts: RFC 3339, Unix seconds, or a duration back from now (\"7d\", \"72h\"); default 30 days ago")
	to := f.String("to", "", "`when` the window ends, as --from; default now")
	nodes := f.String("nodes", "", "only these nodes, a `hostlist` such as node[1-64]")
	g := f.String("g", "", "candidate values of G, a comma-separated `list` such as \"30s,2m,10m\"; default 10s to 6h and the G in force")
	topG := f.String("top-g", "", "the `G` over which the top lists count a teardown long; default the recommended G")
	top := f.Int("top", 0, "length of the top lists (`n`, 1 to 50; default 10)")
	asJSON := f.Bool("json", false, "print the answer as JSON")
	if code, ok := f.ParseN(args, 0, ""); !ok {
		return code
	}
	var gq api.GraceQuery
	now := time.Now()
	var err error
	if gq.From, err = parseWhen(*from, now); err != nil {
		return f.UsageErrorf("--from: %v", err)
	}
	if gq.To, err = parseWhen(*to, now); err != nil {
		return f.UsageErrorf("--to: %v", err)
	}
	gq.Nodes, gq.Top = *nodes, *top
	if *g != "" {
		for _, s := range strings.Split(*g, ",") {
			d, err := parseG(s)
			if err != nil {
				return f.UsageErrorf("--g: %v", err)
			}
			gq.G = append(gq.G, d)
		}
	}
	if *topG != "" {
		if gq.TopG, err = parseG(*topG); err != nil {
			return f.UsageErrorf("--top-g: %v", err)
		}
	}
	return call(c, f, false, *asJSON, func(ctx context.Context, cl *api.Client) (api.GraceAdvice, error) {
		return cl.Grace(ctx, gq)
	}, writeGrace)
}

// parseWhen reads a time: RFC 3339, Unix seconds, or a duration back from
// now (Go's, or whole days "7d"); "" is the zero time (the server's
// default).
func parseWhen(s string, now time.Time) (time.Time, error) {
	switch {
	case s == "":
		return time.Time{}, nil
	case strings.HasSuffix(s, "d"):
		if n, err := strconv.Atoi(strings.TrimSuffix(s, "d")); err == nil && n > 0 && n <= 3650 {
			return now.Add(-time.Duration(n) * 24 * time.Hour), nil
		}
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.Unix(n, 0), nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: want RFC 3339, Unix seconds or a duration back from now (\"7d\", \"12h\")", s)
	}
	return t, nil
}

// parseG reads a candidate G: a Go duration or whole seconds.
func parseG(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q: want a duration (\"90s\", \"2m\") or whole seconds", s)
	}
	return d, nil
}

// nodeList is "n nodes (a, b, …)": the first of them named.
func nodeList(n int, names []string) string {
	s := fmt.Sprintf("%d nodes (%s", n, strings.Join(names, ", "))
	if n > len(names) {
		s += ", …"
	}
	return s + ")"
}

func dur(sec float64) string {
	return (time.Duration(sec * float64(time.Second))).Round(time.Millisecond).String()
}

// writeGrace prints the advice for people.
func writeGrace(w io.Writer, ga api.GraceAdvice) {
	nodes := ga.Nodes
	if nodes == "" {
		nodes = "all nodes"
	}
	fmt.Fprintf(w, "window %s to %s, %s: %d teardowns released, %d running, on %d nodes\n",
		ga.From.Format(time.RFC3339), ga.To.Format(time.RFC3339), nodes, ga.Records, ga.Running, ga.NodesSeen)
	d := ga.Durations
	if d.Count > 0 {
		fmt.Fprintf(w, "durations: p50 %s, p99 %s, p99.9 %s, max %s\n", dur(d.P50), dur(d.P99), dur(d.P999), dur(d.Max))
		for _, e := range d.Above {
			fmt.Fprintf(w, "  counted as %s, the longest that 2 nodes reached: %s job %s, %s %s\n", dur(d.Bound), e.Node, e.Job, e.Outcome, dur(e.Duration))
		}
		for _, c := range d.Capped {
			fmt.Fprintf(w, "  counted as %d teardowns (twice the median node's): %s sent %d\n", d.NodeCap, c.Node, c.Records)
		}
	}
	if lr := ga.LongestRunning; lr != nil {
		fmt.Fprintf(w, "longest running: %s job %s (user %s, %s) for at least %s\n", lr.Node, lr.Job, lr.User, lr.Command, dur(lr.Duration))
	}
	if fl := ga.KillPathFloor; fl != nil {
		fmt.Fprintf(w, "kill-path floor: %s (%s: %s); %s report at least it\n", dur(fl.Seconds), fl.Node, fl.Path, nodeList(fl.Backing, fl.Nodes))
		for _, a := range fl.Above {
			fmt.Fprintf(w, "  not followed (fewer nodes report it): %s %s (%s)\n", a.Node, dur(a.Seconds), a.Path)
		}
	} else {
		fmt.Fprintln(w, "kill-path floor: unknown (fewer than 2 nodes sent one)")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "G\tOVERDUE\tNODES DRAINED\tPLANNED WRONG\tFALSE DRAINS\tUNKNOWN\t")
	for _, c := range ga.Candidates {
		g := dur(c.G)
		if c.InForce {
			g += " (in force)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%d\t\n", g, c.Overdue, c.Nodes, dur(c.PlannedWrong), c.FalseDrains, c.Unknown)
	}
	tw.Flush()
	fmt.Fprintln(w, "(planned wrong: node time past G, Σ (duration − G) over the overdue teardowns; false drains: overdue ones that ended by themselves; unknown: signalled ones no longer than G)")
	if r := ga.Recommendation; r != nil {
		by := "the longest teardown that ended by itself on 2 nodes or more"
		if r.Driver == "floor" {
			by = "the kill-path floor"
		}
		fmt.Fprintf(w, "recommended G: %s, driven by %s\n", dur(r.G), by)
		if e := r.LongestSelfEnded; e != nil {
			fmt.Fprintf(w, "  longest that ended by itself on 2 nodes or more: %s job %s, user %s, %s, %s; %s reach it\n",
				e.Node, e.Job, e.User, e.Command, dur(e.Duration), nodeList(r.Backing, r.Nodes))
		}
		for _, e := range r.Unbacked {
			fmt.Fprintf(w, "  not followed (no other node reached it): %s job %s, user %s, %s, %s %s\n", e.Node, e.Job, e.User, e.Command, e.Outcome, dur(e.Duration))
		}
		fmt.Fprintf(w, "  it drains %d really hung teardowns, misses %d hung ones no G separates, drains %d signalled ones of unknown length, %d unreported, %d that ended by themselves\n",
			r.Caught, r.Missed, r.Signalled, r.Unreported, r.FalseDrains)
		for _, e := range r.CaughtExamples {
			fmt.Fprintf(w, "  caught: %s job %s, user %s, %s, %s %s %s\n", e.Node, e.Job, e.User, e.Command, e.Outcome, dur(e.Duration), e.Cause)
		}
	} else {
		fmt.Fprintf(w, "no recommendation: %s\n", ga.Thin)
	}
	for _, l := range []struct {
		what string
		ts   []api.GraceTop
	}{{"users", ga.TopUsers}, {"commands", ga.TopCommands}} {
		if len(l.ts) == 0 {
			continue
		}
		fmt.Fprintf(w, "top %s (over %s, or hung):", l.what, dur(ga.TopG))
		for _, t := range l.ts {
			fmt.Fprintf(w, " %s %d long, %d hung;", t.Name, t.Long, t.Hung)
		}
		fmt.Fprintln(w)
	}
	for _, n := range ga.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	fmt.Fprintf(w, "history: %d records, %d bytes\n", ga.History.Records, ga.History.Bytes)
}
