package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gracewatch/gracewatch/aggregator"
	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/httpapi"
)

// runIncidents ("incidents") lists the incidents and the blast-radius
// limit.
func runIncidents(c *cli, name string, args []string) int {
	return runShow(c, name, args, "the incidents", func(ctx context.Context, cl *api.Client) (api.IncidentList, error) {
		return cl.Incidents(ctx)
	}, writeIncidents)
}

// writeIncidents prints the incidents as a table for people, after a line
// on the limit.
func writeIncidents(w io.Writer, il api.IncidentList) {
	l := il.Limit
	switch {
	case !l.Enabled:
		fmt.Fprintln(w, "drain limit: none")
	default:
		fmt.Fprintf(w, "drain limit: %d of %d nodes within %v, %d used, %d held", l.Limit, l.KnownNodes,
			time.Duration(l.Window*float64(time.Second)), l.Used, l.Held)
		if !il.Leader {
			fmt.Fprint(w, " (this aggregator does not lead: the leader holds the drains)")
		}
		fmt.Fprintln(w)
	}
	if len(il.Incidents) == 0 {
		fmt.Fprintln(w, "no incidents")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tCAUSE\tNODES\tCOUNT\tCLEAN\tHELD\tSINCE\tDURATION")
	for _, inc := range il.Incidents {
		held := strconv.Itoa(inc.HeldCount)
		if inc.Confirmed {
			held += " (confirmed)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", inc.ID, inc.State, inc.Cause, inc.Nodes, inc.Count, inc.CleanCount,
			held, inc.FirstSeen.UTC().Format(time.RFC3339), (time.Duration(inc.Duration) * time.Second).String())
	}
	tw.Flush()
	for _, inc := range il.Incidents {
		if c := inc.Confirmation; c != nil {
			fmt.Fprintf(w, "incident %d confirmed at %s: %s\n", inc.ID, c.At.UTC().Format(time.RFC3339), coverage(*c))
		}
	}
}

// coverage says what a confirmation covers, in words.
func coverage(c api.Confirmation) string {
	nodes := "no node's drain"
	switch {
	case c.Count == 1:
		nodes = "the drain of " + c.Nodes
	case c.Count > 1:
		nodes = fmt.Sprintf("the drains of %s (%d nodes)", c.Nodes, c.Count)
	}
	if c.Until != nil {
		return fmt.Sprintf("covers %s, and every drain of the incident until %s", nodes, c.Until.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("covers %s; nodes that join later are held past the limit", nodes)
}

// runIncident ("incident confirm ID") lets the held drains of an
// incident's nodes through.
func runIncident(c *cli, name string, args []string) int {
	f := c.newFlags(name)
	reason := f.String("reason", "", "why (required, logged)")
	forD := f.Duration("for", 0, "for this `duration` as well, let through the drains of every node of the incident, those that join it included (at most 24h; default: none, only the incident's nodes now)")
	asJSON := f.Bool("json", false, "print the answer as JSON")
	f.Required = []string{"reason"}
	if code, ok := f.ParseN(args, 2, "confirm ID"); !ok {
		return code
	}
	if f.Args()[0] != "confirm" {
		return f.UsageErrorf("unknown incident subcommand %q (want confirm)", f.Args()[0])
	}
	id, err := strconv.ParseUint(f.Args()[1], 10, 64)
	if err != nil || id == 0 {
		return f.UsageErrorf("incident id %q: want a positive integer (aggregator incidents lists them)", f.Args()[1])
	}
	if len(*reason) > httpapi.MaxReasonBytes || strings.TrimSpace(*reason) == "" {
		return f.UsageErrorf("--reason: want 1 to %d bytes", httpapi.MaxReasonBytes)
	}
	if *forD < 0 || *forD > aggregator.MaxConfirmFor {
		return f.UsageErrorf("--for: want 0 (none) to %v, got %v", aggregator.MaxConfirmFor, *forD)
	}
	return call(c, f, true, *asJSON, func(ctx context.Context, cl *api.Client) (api.IncidentConfirmation, error) {
		return cl.ConfirmIncident(ctx, id, *reason, *forD)
	}, func(w io.Writer, ic api.IncidentConfirmation) {
		fmt.Fprintf(w, "incident %d confirmed: %d held drains let through; it %s\n", ic.ID, ic.Released, coverage(ic.Confirmation))
	})
}
