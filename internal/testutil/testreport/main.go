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
// It exits 1 when a test or a build failed, when the command failed, or when
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
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stderr = stdin, stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintf(stderr, "testreport: %v\n", err)
		return 2
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "testreport: start %s: %v\n", args[0], err)
		return 2
	}
	// Ctrl-C reaches the command too (it is in the terminal's process
	// group): let it end and report what it did.
	signal.Ignore(syscall.SIGINT, syscall.SIGQUIT)
	s := newSummary(stdout)
	readErr := s.read(out)
	if readErr != nil {
		io.Copy(io.Discard, out)
	}
	code := 0
	if err := cmd.Wait(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			fmt.Fprintf(stderr, "testreport: %s: %v\n", args[0], err)
			return 2
		}
		code = ee.ExitCode()
		if code <= 0 {
			code = 1 // killed by a signal
		}
	}
	if readErr != nil {
		fmt.Fprintf(stderr, "testreport: %v\n", readErr)
		return 2
	}
	return s.finish(code)
}
