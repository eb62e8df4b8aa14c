package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json), with the build
// events of `go build -json` that go test also prints.
type event struct {
	Time        time.Time
	Action      string
	Package     string
	Test        string
	Elapsed     float64
	Output      string
	ImportPath  string // build-output, build-fail
	FailedBuild string // on a package's fail: the build that failed
}

// test is what happened to one test (or subtest).
type test struct {
	name   string
	result string // pass, fail, skip; "" while running
	output []string
}

// testLine is one line of a test's output, in the order of the input.
type testLine struct {
	test *test
	text string
}

// pkg is what happened in one package.
type pkg struct {
	name   string
	tests  map[string]*test
	order  []string   // tests in the order they started
	lines  []testLine // every test's output, in order
	output []string   // the package's own lines (panics, "ok ...", "FAIL ...")
	done   bool
}

// skipped is one skipped test and why.
type skipped struct {
	pkg, test, why string
}

// summary accumulates the events and prints as packages end.
type summary struct {
	w      io.Writer
	pkgs   map[pkgKey]*pkg
	builds map[string][]string // build output by ImportPath
	events int

	passed, failed int
	skips          []skipped
	slow           []timed
}

// timed is a top-level test that took at least slowTest.
type timed struct {
	pkg, test string
	elapsed   time.Duration
}

// slowTest and maxSlow: the summary lists the top-level tests that took
// slowTest or more, the slowest maxSlow of them, so that the long poles of
// a suite that nears its time budget are in every run's output.
const (
	slowTest = 30 * time.Second
	maxSlow  = 10
)

func newSummary(w io.Writer) *summary {
	return &summary{w: w, pkgs: map[pkgKey]*pkg{}, builds: map[string][]string{}}
}

// read consumes the events of r until it ends, printing each package as it
// ends. A line that is not an event is printed as it is.
func (s *summary) read(r io.Reader) error {
	return readLines(r, func(line []byte) { s.line(0, line) })
}

// readAll reads the events of several commands at once, each to its end
// (the rest of one is drained when reading it failed, so that its command
// can end); a package is told apart by the command it came from.
func (s *summary) readAll(rs []io.Reader) error {
	type sourced struct {
		src  int
		line []byte
	}
	lines := make(chan sourced)
	errs := make(chan error, len(rs))
	for i, r := range rs {
		go func() {
			err := readLines(r, func(line []byte) { lines <- sourced{i, line} })
			if err != nil {
				io.Copy(io.Discard, r)
			}
			errs <- err
		}()
	}
	var first error
	for ended := 0; ended < len(rs); {
		select {
		case l := <-lines:
			s.line(l.src, l.line)
		case err := <-errs:
			ended++
			if first == nil {
				first = err
			}
		}
	}
	return first
}

// readLines calls f with each line of r (with its newline, the last one
// perhaps without).
func readLines(r io.Reader, f func([]byte)) error {
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			f(line)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read the test events: %w", err)
		}
	}
}

// line takes one line of the command numbered src (from 0).
func (s *summary) line(src int, line []byte) {
	var ev event
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) == 0 || trimmed[0] != '{' || json.Unmarshal(trimmed, &ev) != nil || ev.Action == "" {
		s.w.Write(line)
		if line[len(line)-1] != '\n' {
			io.WriteString(s.w, "\n")
		}
		return
	}
	s.events++
	s.event(src, ev)
}

// pkgKey names package name of command src in summary.pkgs.
type pkgKey struct {
	src  int
	name string
}

func (s *summary) pkg(src int, name string) *pkg {
	k := pkgKey{src, name}
	p := s.pkgs[k]
	if p == nil {
		p = &pkg{name: name, tests: map[string]*test{}}
		s.pkgs[k] = p
	}
	return p
}

func (s *summary) event(src int, ev event) {
	switch ev.Action {
	case "build-output":
		s.builds[ev.ImportPath] = append(s.builds[ev.ImportPath], ev.Output)
		return
	case "build-fail":
		return
	}
	p := s.pkg(src, ev.Package)
	if ev.Test == "" {
		switch ev.Action {
		case "output":
			p.output = append(p.output, ev.Output)
		case "pass", "fail", "skip":
			s.endPackage(p, ev)
		}
		return
	}
	t := p.tests[ev.Test]
	if t == nil {
		t = &test{name: ev.Test}
		p.tests[ev.Test] = t
		p.order = append(p.order, ev.Test)
	}
	switch ev.Action {
	case "output":
		t.output = append(t.output, ev.Output)
		p.lines = append(p.lines, testLine{t, ev.Output})
	case "pass", "fail", "skip":
		t.result = ev.Action
		if el := time.Duration(ev.Elapsed * float64(time.Second)); el >= slowTest && !strings.Contains(ev.Test, "/") {
			s.slow = append(s.slow, timed{pkg: ev.Package, test: ev.Test, elapsed: el})
		}
	}
}

// endPackage prints p's line, and what failed in it, and counts its tests.
func (s *summary) endPackage(p *pkg, ev event) {
	if p.done {
		return
	}
	p.done = true
	failedTests := 0
	for _, name := range p.order {
		t := p.tests[name]
		switch t.result {
		case "pass":
			s.passed++
		case "skip":
			s.skips = append(s.skips, skipped{pkg: p.name, test: name, why: skipReason(t.output)})
		default: // fail, or never ended: the binary died in it (panic, timeout)
			s.failed++
			failedTests++
		}
	}
	// What failed, as go test prints it: a parent's lines around its
	// subtests'.
	for _, l := range p.lines {
		if r := l.test.result; r != "pass" && r != "skip" {
			io.WriteString(s.w, l.text)
		}
	}
	switch ev.Action {
	case "pass":
		fmt.Fprint(s.w, pkgLine(p, "ok  ", fmt.Sprintf("%.3fs", ev.Elapsed)))
	case "skip":
		fmt.Fprint(s.w, pkgLine(p, "?   ", "[no test files]"))
	case "fail":
		if failedTests == 0 {
			s.failed++ // a build failure, or a failure outside any test
		}
		if ev.FailedBuild != "" {
			for _, l := range s.builds[ev.FailedBuild] {
				io.WriteString(s.w, l)
			}
		}
		for _, l := range p.output {
			if l != "PASS\n" && l != "FAIL\n" && !strings.HasPrefix(l, "FAIL\t"+p.name) {
				io.WriteString(s.w, l)
			}
		}
		fmt.Fprint(s.w, pkgLine(p, "FAIL", fmt.Sprintf("%.3fs", ev.Elapsed)))
	}
}

// pkgLine is the package's own closing line from its output when it has
// one ("ok  \tpkg\t0.02s", "FAIL\tpkg [build failed]", "?   \tpkg\t[no test
// files]"), else one made alike.
func pkgLine(p *pkg, status, detail string) string {
	for i := len(p.output) - 1; i >= 0; i-- {
		if l := p.output[i]; strings.HasPrefix(l, status+"\t"+p.name) {
			return l
		}
	}
	return status + "\t" + p.name + "\t" + detail + "\n"
}

// maxSkipReason bounds a skip reason's length in the summary: the list is
// read to learn what did not run, a line a test.
const maxSkipReason = 240

// logEntry matches the first line of one t.Log/t.Skip entry as go test
// prints it: "    name_test.go:12: text".
var logEntry = regexp.MustCompile(`^\s*[^\s:]+\.go:\d+: `)

// skipReason is a skipped test's message: the last entry it logged before
// it was skipped (t.Skip's own), its continuation lines joined to it, on
// one line of at most maxSkipReason characters; never the log that came
// before it, which a test that skips late may have plenty of.
func skipReason(output []string) string {
	var entry []string
	for _, l := range output {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		if logEntry.MatchString(l) || entry == nil {
			entry = entry[:0]
		}
		entry = append(entry, t)
	}
	if len(entry) == 0 {
		return "(no message)"
	}
	why := strings.Join(entry, " ")
	if r := []rune(why); len(r) > maxSkipReason {
		why = string(r[:maxSkipReason-1]) + "…"
	}
	return why
}

// finish prints the tests that never ended in a package that never ended
// (the input was cut), the skipped tests and the closing line, and returns
// the exit status: 1 when anything failed, when the command exited with
// status code, or when there was no test event at all.
func (s *summary) finish(code int) int {
	for _, p := range s.pkgs {
		if !p.done && p.name != "" {
			s.endPackage(p, event{Action: "fail"})
		}
	}
	if s.events == 0 {
		fmt.Fprintln(s.w, "testreport: no test events in the input (was go test run with -json?)")
	}
	if code != 0 && s.failed == 0 {
		fmt.Fprintf(s.w, "testreport: the command exited with status %d\n", code)
		s.failed++
	}
	if len(s.skips) > 0 {
		fmt.Fprintf(s.w, "\nSkipped (%d):\n", len(s.skips))
		for _, sk := range s.skips {
			fmt.Fprintf(s.w, "  %s %s: %s\n", sk.pkg, sk.test, sk.why)
		}
		fmt.Fprintln(s.w)
	}
	if len(s.slow) > 0 {
		slices.SortStableFunc(s.slow, func(a, b timed) int { return int(b.elapsed - a.elapsed) })
		fmt.Fprintf(s.w, "Slowest tests (%d took %v or more; at most %d listed):\n", len(s.slow), slowTest, maxSlow)
		for _, sl := range s.slow[:min(len(s.slow), maxSlow)] {
			fmt.Fprintf(s.w, "  %7.1fs %s %s\n", sl.elapsed.Seconds(), sl.pkg, sl.test)
		}
		fmt.Fprintln(s.w)
	}
	fmt.Fprintf(s.w, "%d passed, %d failed, %d skipped\n", s.passed, s.failed, len(s.skips))
	if s.failed > 0 || s.events == 0 {
		return 1
	}
	return 0
}
