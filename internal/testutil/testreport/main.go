// Command testreport summarizes `go test -json`: it prints what go test
// prints without -v (a line per package, and the output of what failed:
// failed tests, build errors, panics, timeouts), then every skipped test
// with its skip message, then the slowest top-level tests of 30 s or more
// (ten at most), then a closing line alone on its line:
//
//	N passed, N failed, N skipped
//
// It reads the events from its standard input, or runs the command its
// arguments name and reads that command's standard output (so that the
// command's exit status is not lost in a shell pipe):
//
//	go run ./internal/testutil/testreport go test -race -json ./...
//	go test -json ./... | go run ./internal/testutil/testreport
//
// Several commands, separated by an argument ":::", run at once, and their
// events make one summary; the same package in two of them (a package's
// tests split by -run and -skip) is two packages of the same name, each
// with its own line:
//
//	testreport go test -json -run '^TestA$' ./e2e/ ::: go test -json -skip '^TestA$' ./e2e/
//
// It exits 1 when a test or a build failed, when a command failed, or when
// the input held no test event at all; 2 when it could not run at all.
// `make test` runs it (Makefile).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run is main with its inputs and outputs: it returns the exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		s := newSummary(stdout)
		if err := s.read(stdin); err != nil {
			fmt.Fprintf(stderr, "testreport: %v\n", err)
			return 2
		}
		return s.finish(0)
	}
	var cmds []*exec.Cmd
	for _, argv := range splitCommands(args) {
		if len(argv) == 0 {
			fmt.Fprintln(stderr, "testreport: an empty command (two ::: in a row, or ::: at an end)")
			return 2
		}
		cmds = append(cmds, exec.Command(argv[0], argv[1:]...))
	}
	outs := make([]io.Reader, len(cmds))
	for i, cmd := range cmds {
		cmd.Stdin, cmd.Stderr = stdin, stderr
		if len(cmds) > 1 {
			cmd.Stdin = nil // one terminal's input for several commands: none reads it
		}
		out, err := cmd.StdoutPipe()
		if err == nil {
			err = cmd.Start()
		}
		if err != nil {
			fmt.Fprintf(stderr, "testreport: start %s: %v\n", cmd.Args[0], err)
			for _, started := range cmds[:i] {
				_ = started.Process.Kill() // by the pid it started
				_ = started.Wait()
			}
			return 2
		}
		outs[i] = out
	}
	// Ctrl-C reaches the commands too (they are in the terminal's process
	// group): let them end and report what they did.
	signal.Ignore(syscall.SIGINT, syscall.SIGQUIT)
	s := newSummary(stdout)
	readErr := s.readAll(outs)
	code := 0
	for _, cmd := range cmds {
		err := cmd.Wait()
		if c := exitCode(err); c < 0 {
			fmt.Fprintf(stderr, "testreport: %s: %v\n", cmd.Args[0], err)
			return 2
		} else if code == 0 {
			code = c
		}
	}
	if readErr != nil {
		fmt.Fprintf(stderr, "testreport: %v\n", readErr)
		return 2
	}
	return s.finish(code)
}

// splitCommands splits args at each ":::".
func splitCommands(args []string) [][]string {
	var cmds [][]string
	cur := []string{}
	for _, a := range args {
		if a == ":::" {
			cmds = append(cmds, cur)
			cur = []string{}
			continue
		}
		cur = append(cur, a)
	}
	return append(cmds, cur)
}

// exitCode is a command's exit status from its Wait: 0, its code, 1 when a
// signal killed it; -1 when it could not be waited for.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return -1
	}
	if c := ee.ExitCode(); c > 0 {
		return c
	}
	return 1 // killed by a signal
}
