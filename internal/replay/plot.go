package replay

import (
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// MaxPlotRows bounds the CSV a plot reads.
const MaxPlotRows = 10000

// Plot reads the CSV of WriteCSV and draws, as an SVG, two panels across
// hang rates (a logarithmic axis): node-hours lost and mean wait, one line
// per run.
func Plot(r io.Reader, title string) (string, error) {
	cr := csv.NewReader(r)
	head, err := cr.Read()
	if err != nil {
		return "", fmt.Errorf("plot: header: %w", err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[h] = i
	}
	for _, c := range []string{"run", "hung_rate", "lost_node_h", "wait_mean_s"} {
		if _, ok := col[c]; !ok {
			return "", fmt.Errorf("plot: no column %q", c)
		}
	}
	type point struct{ x, lost, wait float64 }
	series := map[string][]point{}
	var order []string
	for n := 0; ; n++ {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", fmt.Errorf("plot: %w", err)
		}
		if n == MaxPlotRows {
			return "", fmt.Errorf("plot: more than %d rows", MaxPlotRows)
		}
		num := func(c string) (float64, error) {
			v, err := strconv.ParseFloat(rec[col[c]], 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				return 0, fmt.Errorf("plot: row %d: %s %q", n+2, c, rec[col[c]])
			}
			return v, nil
		}
		x, err1 := num("hung_rate")
		lost, err2 := num("lost_node_h")
		wait, err3 := num("wait_mean_s")
		if err := errors.Join(err1, err2, err3); err != nil { // every bad column of the row
			return "", err
		}
		if x <= 0 {
			return "", fmt.Errorf("plot: row %d: hung rate %g: a logarithmic axis needs > 0", n+2, x)
		}
		run := rec[col["run"]]
		if _, ok := series[run]; !ok {
			order = append(order, run)
		}
		series[run] = append(series[run], point{x, lost, wait})
	}
	if len(order) == 0 {
		return "", fmt.Errorf("plot: no rows")
	}
	const W, H, panelW, panelH, left, top = 900, 420, 340, 280, 70, 60
	xs := []float64{}
	maxLost, maxWait := 0.0, 0.0
	for _, run := range order {
		slices.SortFunc(series[run], func(a, b point) int { return cmp.Compare(a.x, b.x) })
		for _, p := range series[run] {
			xs = append(xs, p.x)
			maxLost, maxWait = math.Max(maxLost, p.lost), math.Max(maxWait, p.wait)
		}
	}
	lo, hi := math.Log10(slices.Min(xs)), math.Log10(slices.Max(xs))
	if hi-lo < 1e-9 {
		lo, hi = lo-0.5, hi+0.5
	}
	colors := []string{"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e"}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/><text x="%d" y="24" font-size="15">%s</text>`+"\n", W, H, left, xmlEscape(title))
	panel := func(ox int, name string, ymax float64, y func(point) float64) {
		ymax = niceMax(ymax)
		px := func(x float64) float64 { return float64(ox) + (math.Log10(x)-lo)/(hi-lo)*panelW }
		py := func(v float64) float64 { return top + panelH - v/ymax*panelH }
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", ox, top-10, xmlEscape(name))
		fmt.Fprintf(&b, `<path d="M%d %d V%d H%d" fill="none" stroke="black"/>`+"\n", ox, top, top+panelH, ox+panelW)
		for i := 0; i <= 4; i++ {
			v := ymax * float64(i) / 4
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text><path d="M%d %.1f h%d" stroke="#ddd"/>`+"\n",
				ox-5, py(v)+4, strconv.FormatFloat(v, 'g', 3, 64), ox, py(v), panelW)
		}
		seen := map[float64]bool{}
		for _, x := range xs {
			if !seen[x] {
				seen[x] = true
				fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s %%</text>`+"\n", px(x), top+panelH+16, strconv.FormatFloat(100*x, 'g', 3, 64))
			}
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">hang rate (of node teardowns, log scale)</text>`+"\n", ox+panelW/2, top+panelH+34)
		for i, run := range order {
			c := colors[i%len(colors)]
			var d strings.Builder
			for j, p := range series[run] {
				fmt.Fprintf(&d, "%s%.1f %.1f ", map[bool]string{true: "M", false: "L"}[j == 0], px(p.x), py(y(p)))
			}
			fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.TrimSpace(d.String()), c)
			for _, p := range series[run] {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px(p.x), py(y(p)), c)
			}
		}
	}
	panel(left, "node-hours lost (teardown + held idle)", maxLost, func(p point) float64 { return p.lost })
	panel(left+panelW+110, "mean wait (s, replayed time)", maxWait, func(p point) float64 { return p.wait })
	for i, run := range order {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="14" height="3" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			left+i*200, H-22, colors[i%len(colors)], left+i*200+20, H-18, xmlEscape(run))
	}
	b.WriteString("</svg>\n")
	return b.String(), nil
}

func niceMax(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
