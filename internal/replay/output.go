package replay

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Setup is what a row of figures was measured under, written beside them.
type Setup struct {
	Trace                  string
	WindowStart, WindowLen int
	Nodes                  int
	Compression            float64
	// MaxRun is Mapping.MaxRun (0: no run trimmed).
	MaxRun time.Duration
	Grace  time.Duration
	Model  Model
}

// Columns are the CSV columns of WriteCSV, in order.
var Columns = []string{"run", "hung_rate", "slow_rate", "seed", "window_start", "window_jobs", "nodes", "compression", "grace_s",
	"jobs", "started", "lost_node_h", "teardown_node_h", "held_node_h", "wait_mean_s", "wait_p95_s", "bounded_slowdown",
	"makespan_s", "on_tearing_down", "hung", "drains", "false_drains", "drained_late", "down_after_d_p50_s",
	"down_after_d_p99_s", "commands", "writes", "max_run_s"}

// Row is one run's CSV row.
func Row(s Setup, f Figures) []string {
	g := func(x float64) string { return strconv.FormatFloat(x, 'f', 4, 64) }
	d := func(x time.Duration) string { return strconv.FormatFloat(x.Seconds(), 'f', 2, 64) }
	i := strconv.Itoa
	return []string{f.Run, g(s.Model.HungRate), g(s.Model.SlowRate), strconv.FormatUint(s.Model.Seed, 10), i(s.WindowStart),
		i(s.WindowLen), i(s.Nodes), g(s.Compression), d(s.Grace), i(f.Jobs), i(f.Started), g(f.LostNodeHours),
		g(f.TeardownNodeHours), g(f.HeldNodeHours), d(f.WaitMean), d(f.WaitP95), g(f.BoundedSlowdown), d(f.Makespan),
		i(f.OnTearingDown), i(f.Hung), i(f.Drains), i(f.FalseDrains), i(f.DrainedLate), d(f.DownAfterDP50),
		d(f.DownAfterDP99), i(f.Commands), i(f.Writes), d(s.MaxRun)}
}

// WriteCSV writes a header (if header) and one row per run.
func WriteCSV(w io.Writer, header bool, s Setup, fs ...Figures) error {
	cw := csv.NewWriter(w)
	if header {
		if err := cw.Write(Columns); err != nil {
			return err
		}
	}
	for _, f := range fs {
		if err := cw.Write(Row(s, f)); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// Table is the runs side by side as a Markdown table, node-hours and
// times in real (replayed) units.
func Table(fs ...Figures) string {
	var b strings.Builder
	b.WriteString("| figure |")
	for _, f := range fs {
		fmt.Fprintf(&b, " %s |", f.Run)
	}
	b.WriteString("\n| --- |" + strings.Repeat(" --- |", len(fs)) + "\n")
	row := func(name string, v func(Figures) string) {
		b.WriteString("| " + name + " |")
		for _, f := range fs {
			b.WriteString(" " + v(f) + " |")
		}
		b.WriteString("\n")
	}
	sec := func(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s" }
	row("jobs started / in window", func(f Figures) string { return fmt.Sprintf("%d / %d", f.Started, f.Jobs) })
	row("node-hours lost (teardown + held)", func(f Figures) string {
		return fmt.Sprintf("%.3f (%.3f + %.3f)", f.LostNodeHours, f.TeardownNodeHours, f.HeldNodeHours)
	})
	row("wait mean / p95", func(f Figures) string { return sec(f.WaitMean) + " / " + sec(f.WaitP95) })
	row("bounded slowdown (mean)", func(f Figures) string { return strconv.FormatFloat(f.BoundedSlowdown, 'f', 2, 64) })
	row("makespan", func(f Figures) string { return sec(f.Makespan) })
	row("jobs started on a node tearing down", func(f Figures) string { return strconv.Itoa(f.OnTearingDown) })
	row("hung teardowns / drains / false drains", func(f Figures) string {
		return fmt.Sprintf("%d / %d / %d", f.Hung, f.Drains, f.FalseDrains)
	})
	row("drained after D p50 / p99 (late > 2 s)", func(f Figures) string {
		return fmt.Sprintf("%s / %s (%d)", sec(f.DownAfterDP50), sec(f.DownAfterDP99), f.DrainedLate)
	})
	row("scontrol commands by gracewatch (writes)", func(f Figures) string { return fmt.Sprintf("%d (%d)", f.Commands, f.Writes) })
	return b.String()
}
