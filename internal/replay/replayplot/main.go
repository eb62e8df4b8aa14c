// Command replayplot draws the replay's figures across hang rates (the CSV
// that e2e's TestReplay writes with GRACEWATCH_REPLAY_CSV) as an SVG:
//
//	go run ./internal/replay/replayplot -in docs/replay/hang-rates.csv -out docs/replay/hang-rates.svg
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/gracewatch/gracewatch/internal/replay"
)

func main() {
	in := flag.String("in", "", "the CSV of the runs")
	out := flag.String("out", "", "the SVG to write")
	title := flag.String("title", "Replay across hang rates", "the plot's title")
	flag.Parse()
	if err := run(*in, *out, *title); err != nil {
		fmt.Fprintln(os.Stderr, "replayplot:", err)
		os.Exit(1)
	}
}

func run(in, out, title string) error {
	if in == "" || out == "" {
		return fmt.Errorf("-in and -out are required")
	}
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	svg, err := replay.Plot(f, title)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	return os.WriteFile(out, []byte(svg), 0o644)
}
