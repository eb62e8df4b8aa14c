package cmdutil

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

type env struct{ ran []string }

func testProgram() (*Program[*env], *bytes.Buffer, *bytes.Buffer, Out) {
	var stdout, stderr bytes.Buffer
	out := Out{Prog: "prog", Stdout: &stdout, Stderr: &stderr}
	p := &Program[*env]{Name: "prog"}
	run := func(e *env, name string, args []string) int {
		f := NewFlags(out, p.Lookup(name))
		f.Interleaved = name == "thing"
		if name == "job start" {
			f.Required = []string{"n"}
		}
		n := f.Int("n", 0, "a `number`")
		f.Check = func() error {
			if *n < 0 {
				return fmt.Errorf("--n: %d is negative", *n)
			}
			return nil
		}
		if code, ok := f.ParseN(args, 1, "NAME"); !ok {
			return code
		}
		e.ran = append(e.ran, fmt.Sprintf("%s %s n=%d", name, f.Args()[0], *n))
		return ExitOK
	}
	p.Commands = []*Command[*env]{
		{Name: "thing", Args: "NAME [--n N]", Summary: "do a thing", Run: run},
		{Name: "job start", Args: "NAME [--n N]", Summary: "start a job", Run: run},
		{Name: "help", Args: "[COMMAND]", Summary: "show help"},
	}
	return p, &stdout, &stderr, out
}

func TestCommands(t *testing.T) {
	p, stdout, stderr, out := testProgram()
	e := &env{}
	if cmd, rest := p.Find([]string{"job", "start", "x", "--n", "2"}); cmd == nil || cmd.Name != "job start" || len(rest) != 3 {
		t.Fatalf("Find = %v %v", cmd, rest)
	}
	cmd := p.Lookup("thing")
	for _, c := range []struct {
		cmd  string
		args []string
		code int
		want string // in stderr, or the run
	}{
		{"thing", []string{"a", "--n", "3"}, ExitOK, "thing a n=3"},         // interleaved
		{"thing", []string{"--n=4", "--", "-b"}, ExitOK, "thing -b n=4"},    // -- ends the flags
		{"job start", []string{"--n", "1", "x"}, ExitOK, "job start x n=1"}, // flags first
		{"job start", []string{"x", "--n", "1"}, ExitUsage, "unexpected argument \"--n\""},
		{"job start", []string{"x"}, ExitUsage, "prog job start: --n is required"},
		{"job start", nil, ExitUsage, "prog job start: NAME is required"}, // the arguments first
		{"thing", nil, ExitUsage, "prog thing: NAME is required\nusage: prog thing NAME [--n N]"},
		{"thing", []string{"a", "--n", "-1"}, ExitUsage, "prog thing: --n: -1 is negative"},
		{"thing", []string{"--bogus"}, ExitUsage, "flag provided but not defined: -bogus"},
	} {
		stderr.Reset()
		e.ran = nil
		code := p.Lookup(c.cmd).Run(e, c.cmd, c.args)
		got := stderr.String()
		if len(e.ran) > 0 {
			got = e.ran[0]
		}
		if code != c.code || !strings.Contains(got, c.want) {
			t.Errorf("%s %q: exit %d, %q; want %d and %q", c.cmd, c.args, code, got, c.code, c.want)
		}
	}
	stdout.Reset()
	if code := cmd.Run(e, "thing", []string{"-h"}); code != ExitOK || !strings.Contains(stdout.String(), "usage: prog thing NAME [--n N]\n\nDo a thing.\n\nflags:\n  -n number") {
		t.Errorf("-h: exit %d, %q", code, stdout.String())
	}
	stdout.Reset()
	p.Usage(stdout)
	if !strings.Contains(stdout.String(), "  job start  start a job\n") || !strings.HasPrefix(stdout.String(), "usage: prog COMMAND [FLAGS]\n") {
		t.Errorf("usage %q", stdout.String())
	}
	// Every summary starts in the same column, whatever the names' lengths.
	_, list, _ := strings.Cut(stdout.String(), "commands:\n")
	lines := strings.Split(list, "\n")
	for i, cmd := range p.Commands {
		if at, first := strings.Index(lines[i], cmd.Summary), strings.Index(lines[0], p.Commands[0].Summary); at != first || !strings.HasPrefix(lines[i], "  "+cmd.Name+"  ") {
			t.Errorf("usage line %q: its summary at column %d, the first line's at %d", lines[i], at, first)
		}
	}
	stderr.Reset()
	if code := p.Help(e, out, []string{"nope"}); code != ExitUsage || !strings.HasPrefix(stderr.String(), "prog help: unknown command \"nope\"") {
		t.Errorf("help nope: %d %q", code, stderr.String())
	}
}

func TestCall(t *testing.T) {
	var stdout, stderr bytes.Buffer
	out := Out{Prog: "prog", Stdout: &stdout, Stderr: &stderr}
	ok := func(context.Context) (map[string]int, error) { return map[string]int{"a": 1}, nil }
	text := func(w io.Writer, v map[string]int) { fmt.Fprintf(w, "a is %d\n", v["a"]) }
	if code := Call(out, false, ok, text); code != ExitOK || stdout.String() != "a is 1\n" {
		t.Errorf("text: %d %q", code, stdout.String())
	}
	stdout.Reset()
	if code := Call(out, true, ok, text); code != ExitOK || stdout.String() != "{\n  \"a\": 1\n}\n" {
		t.Errorf("json: %d %q", code, stdout.String())
	}
	stdout.Reset()
	fail := func(context.Context) (map[string]int, error) { return nil, errors.New("refused") }
	if code := Call(out, true, fail, text); code != ExitError || stderr.String() != "prog: refused\n" || stdout.Len() != 0 {
		t.Errorf("error: %d %q %q", code, stderr.String(), stdout.String())
	}
}

// The preamble both command lines share: no command is a usage error with
// the usage on stderr, -h the usage on stdout, anything else goes on to the
// command; UsageFail names the program and prints the usage; the version
// line names the program.
func TestStartAndUsageFail(t *testing.T) {
	for _, c := range []struct {
		args     []string
		code     int
		ok       bool
		out, err string
	}{
		{args: nil, code: ExitUsage, err: "usage: prog COMMAND"},
		{args: []string{"--help"}, code: ExitOK, out: "usage: prog COMMAND"},
		{args: []string{"-h"}, code: ExitOK, out: "usage: prog COMMAND"},
		{args: []string{"thing", "-h"}, code: ExitOK, ok: true},
	} {
		p, stdout, stderr, out := testProgram()
		code, ok := p.Start(out, c.args)
		if code != c.code || ok != c.ok || !strings.Contains(stdout.String(), c.out) || !strings.Contains(stderr.String(), c.err) ||
			(c.out == "" && stdout.Len() > 0) || (c.err == "" && stderr.Len() > 0) {
			t.Errorf("Start(%q) = %d, %v; stdout %q, stderr %q", c.args, code, ok, stdout, stderr)
		}
	}
	p, stdout, stderr, out := testProgram()
	if code := p.UsageFail(out, "unknown command %q", "x"); code != ExitUsage || stdout.Len() > 0 ||
		!strings.HasPrefix(stderr.String(), "prog: unknown command \"x\"\nusage: prog COMMAND") {
		t.Errorf("UsageFail = %d; stderr %q", code, stderr)
	}
	_, stdout, _, out = testProgram()
	if code := out.PrintVersion(); code != ExitOK || !strings.HasPrefix(stdout.String(), "prog ") || !strings.Contains(stdout.String(), "/") {
		t.Errorf("PrintVersion = %d, %q", code, stdout)
	}
}
