package cmdutil

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// The command framework that both programs' command lines run on: a table
// of commands (Program), each with its flag set (Flags), and the one
// sequence of a client command, "call, then print JSON or text" (Call).
// Adding a command is its table entry and a function that declares its
// flags, parses them and calls Call.

// Command is one subcommand. C is what the program's commands get from
// the process (its writers, environment, clients).
type Command[C any] struct {
	Name    string // one or more words: "status", "job start"
	Args    string // argument synopsis
	Summary string // one line, lower case, no final stop
	Run     func(c C, name string, args []string) int
	// Client marks a command that talks to the program's service (the
	// program adds its connection flags to such a command).
	Client bool
}

// Program is a command line: its name (that messages start with) and its
// commands.
type Program[C any] struct {
	Name     string
	Commands []*Command[C]
	// Footer prints what Usage says after the command list.
	Footer func(w io.Writer)
}

// Lookup returns the command named name exactly, or nil.
func (p *Program[C]) Lookup(name string) *Command[C] {
	for _, cmd := range p.Commands {
		if cmd.Name == name {
			return cmd
		}
	}
	return nil
}

// Find returns the command whose (one or more) words start args, and the
// rest of args; nil when none does.
func (p *Program[C]) Find(args []string) (*Command[C], []string) {
	for _, cmd := range p.Commands {
		words := strings.Fields(cmd.Name)
		if len(args) >= len(words) && strings.Join(args[:len(words)], " ") == cmd.Name {
			return cmd, args[len(words):]
		}
	}
	return nil, nil
}

// Usage prints the program's synopsis, its commands and its Footer.
func (p *Program[C]) Usage(w io.Writer) {
	fmt.Fprintf(w, "usage: %s COMMAND [FLAGS]\n", p.Name)
	fmt.Fprintln(w, "\ncommands:")
	// The summaries in one column, past the longest name.
	width := 0
	for _, cmd := range p.Commands {
		width = max(width, len(cmd.Name))
	}
	for _, cmd := range p.Commands {
		fmt.Fprintf(w, "  %-*s  %s\n", width, cmd.Name, cmd.Summary)
	}
	if p.Footer != nil {
		p.Footer(w)
	}
}

// Start is what the command line does before its command: with none it
// prints the usage on stderr (exit 2), with -h, -help or --help on stdout
// (exit 0). ok=false: the program exits with code.
func (p *Program[C]) Start(out Out, args []string) (code int, ok bool) {
	if len(args) == 0 {
		p.Usage(out.Stderr)
		return ExitUsage, false
	}
	switch args[0] {
	case "-h", "-help", "--help":
		p.Usage(out.Stdout)
		return ExitOK, false
	}
	return ExitOK, true
}

// UsageFail prints "PROG: message" and the program's usage on stderr and
// returns ExitUsage: a command line without a command it knows.
func (p *Program[C]) UsageFail(out Out, format string, a ...any) int {
	fmt.Fprintf(out.Stderr, "%s: %s\n", p.Name, fmt.Sprintf(format, a...))
	p.Usage(out.Stderr)
	return ExitUsage
}

// Help runs `PROG help [COMMAND]`: the program's usage, or the command's
// help (its Run with -h, which prints its flags). An unknown command is a
// usage error.
func (p *Program[C]) Help(c C, out Out, args []string) int {
	if len(args) == 0 {
		p.Usage(out.Stdout)
		return ExitOK
	}
	cmd, rest := p.Find(args)
	if cmd == nil || len(rest) > 0 {
		fmt.Fprintf(out.Stderr, "%s help: unknown command %q\n", p.Name, strings.Join(args, " "))
		p.Usage(out.Stderr)
		return ExitUsage
	}
	if cmd.Name == "help" {
		CommandUsage(out.Stdout, p.Name, cmd.Name, cmd.Args, cmd.Summary, nil)
		return ExitOK
	}
	return cmd.Run(c, cmd.Name, []string{"-h"})
}

// Flags is the flag set of one command and its positional arguments.
type Flags struct {
	*flag.FlagSet
	Out
	Name, Synopsis, Summary string // the command's
	// Interleaved lets positional arguments stand among the flags
	// ("resume NODE --reason X" as well as "resume --reason X NODE");
	// without it the first positional argument ends the flags, as the flag
	// package does (epilog's CMD ARGS...).
	Interleaved bool
	// Check, if set, validates the parsed flags; its error is a usage
	// error.
	Check func() error
	// Required are flags that must be given: ParseN refuses a command
	// line without one, after the positional arguments ("--NAME is
	// required").
	Required []string
	args     []string
}

// NewFlags returns the flag set of cmd of the program prog.
func NewFlags[C any](out Out, cmd *Command[C]) *Flags {
	fs := flag.NewFlagSet(out.Prog+" "+cmd.Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return &Flags{FlagSet: fs, Out: out, Name: cmd.Name, Synopsis: cmd.Args, Summary: cmd.Summary}
}

// Parse parses args; when it returns ok=false the command exits with code
// (0 after -h, which printed the command's help; 2 on a usage error).
func (f *Flags) Parse(args []string) (code int, ok bool) {
	for {
		err := f.FlagSet.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			CommandUsage(f.Stdout, f.Prog, f.Name, f.Synopsis, f.Summary, f.FlagSet)
			return ExitOK, false
		}
		if err != nil {
			return f.UsageErrorf("%v", err), false
		}
		if !f.Interleaved || f.NArg() == 0 {
			f.args = append(f.args, f.FlagSet.Args()...)
			break
		}
		rest := f.FlagSet.Args()
		if rest[0] == "--" {
			f.args = append(f.args, rest[1:]...)
			break
		}
		f.args = append(f.args, rest[0])
		args = rest[1:]
	}
	if f.Check != nil {
		if err := f.Check(); err != nil {
			return f.UsageErrorf("%v", err), false
		}
	}
	return ExitOK, true
}

// ParseN parses args and requires n positional arguments (what names them
// when they are missing).
func (f *Flags) ParseN(args []string, n int, what string) (int, bool) {
	if code, ok := f.Parse(args); !ok {
		return code, false
	}
	switch {
	case len(f.args) < n:
		return f.UsageErrorf("%s is required", what), false
	case len(f.args) > n:
		return f.UsageErrorf("unexpected argument %q", f.args[n]), false
	}
	for _, name := range f.Required {
		if !f.IsSet(name) {
			return f.UsageErrorf("--%s is required", name), false
		}
	}
	return ExitOK, true
}

// Args returns the positional arguments.
func (f *Flags) Args() []string { return f.args }

// IsSet reports whether the flag name was given.
func (f *Flags) IsSet(name string) bool { return IsSet(f.FlagSet, name) }

// UsageErrorf prints a usage error naming the command and its synopsis and
// returns ExitUsage.
func (f *Flags) UsageErrorf(format string, a ...any) int {
	return f.UsageError(f.Name, f.Synopsis, format, a...)
}

// Call is the end of every client command: it runs call with a context,
// fails the command (exit 1) on its error, and prints its result as
// indented JSON when asJSON, else with text.
func Call[T any](out Out, asJSON bool, call func(ctx context.Context) (T, error), text func(w io.Writer, v T)) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v, err := call(ctx)
	if err != nil {
		return out.Fail(err)
	}
	if asJSON {
		return out.PrintJSON(v)
	}
	text(out.Stdout, v)
	return ExitOK
}
