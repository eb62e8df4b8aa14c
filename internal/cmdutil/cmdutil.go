// Package cmdutil holds what the command lines of nodeagent and aggregator
// share: exit codes, error and usage messages, command help and JSON
// output.
package cmdutil

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/gracewatch/gracewatch/internal/version"
)

// Exit codes of both programs' commands.
const (
	ExitOK    = 0
	ExitError = 1 // the agent or aggregator refused, or could not be reached
	ExitUsage = 2 // bad command line
)

// Out is where a program's command writes, and the program's name
// ("nodeagent", "aggregator") that its messages start with.
type Out struct {
	Prog           string
	Stdout, Stderr io.Writer
}

// Fail prints err as "PROG: err" on stderr and returns ExitError.
func (o Out) Fail(err error) int {
	fmt.Fprintf(o.Stderr, "%s: %v\n", o.Prog, err)
	return ExitError
}

// UsageError prints a usage error naming the command, and the command's
// synopsis, on stderr and returns ExitUsage.
func (o Out) UsageError(cmd, args, format string, a ...any) int {
	fmt.Fprintf(o.Stderr, "%s %s: %s\n", o.Prog, cmd, fmt.Sprintf(format, a...))
	fmt.Fprintf(o.Stderr, "usage: %s %s %s\n", o.Prog, cmd, args)
	return ExitUsage
}

// PrintJSON prints v as indented JSON on stdout.
func (o Out) PrintJSON(v any) int {
	enc := json.NewEncoder(o.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return o.Fail(err)
	}
	return ExitOK
}

// PrintVersion prints the program's version line: "PROG VERSION (GO,
// OS/ARCH)".
func (o Out) PrintVersion() int {
	fmt.Fprintf(o.Stdout, "%s %s (%s, %s/%s)\n", o.Prog, version.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return ExitOK
}

// PrintConfig prints what config check says of a valid configuration: that
// the file at path (empty: none, the defaults alone) is valid, then the
// effective configuration cfg as TOML.
func (o Out) PrintConfig(path string, cfg any) int {
	text, err := toml.Marshal(cfg)
	if err != nil {
		return o.Fail(err)
	}
	if path == "" {
		path = "(defaults)"
	}
	fmt.Fprintf(o.Stdout, "# %s is valid; the effective configuration:\n%s", path, text)
	return ExitOK
}

// ConfigPath is the configuration file a daemon reads: the --config flag's
// value, else defaultPath if it exists, else empty (the defaults alone).
func ConfigPath(flagValue, defaultPath string) string {
	if flagValue != "" {
		return flagValue
	}
	if _, err := os.Stat(defaultPath); err == nil {
		return defaultPath
	}
	return ""
}

// CommandUsage prints a command's synopsis, its summary as a sentence and
// its flags (fs may be nil).
func CommandUsage(w io.Writer, prog, cmd, args, summary string, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: %s %s %s\n\n%s.\n", prog, cmd, args, upperFirst(summary))
	if fs == nil {
		return
	}
	has := false
	fs.VisitAll(func(*flag.Flag) { has = true })
	if has {
		fmt.Fprintln(w, "\nflags:")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
}

// IsSet reports whether the flag name was given on the command line.
func IsSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(fl *flag.Flag) {
		if fl.Name == name {
			set = true
		}
	})
	return set
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// NewLogger is a program's logger on w: format "json" or text, at level
// ("debug", "info", "warn", "error"; the configuration validated it).
func NewLogger(w io.Writer, format, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: l}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
