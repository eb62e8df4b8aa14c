// Package doccheck reads the repository's documents (README.md,
// BENCHMARKS.md) for the tests that keep them true to the code. Each such
// test lives in the package that owns what it checks (a command line's
// table, the HTTP router) and names the document's line that is missing or
// wrong, so that a change of the code without its line in the document
// fails where the change is made.
package doccheck

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gracewatch/gracewatch/internal/cmdutil"
)

// Doc is one document of the repository, split into lines.
type Doc struct {
	// Name is its path from the repository's root ("README.md").
	Name  string
	Lines []string
}

// Read reads the document at rel, a path from the repository's root, which
// is the nearest directory above the test's working directory (its
// package's) that holds go.mod.
func Read(t testing.TB, rel string) *Doc {
	t.Helper()
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatalf("read %s: %v", rel, err)
	}
	return &Doc{Name: rel, Lines: strings.Split(string(data), "\n")}
}

// Root is the repository's root: the nearest directory above the working
// directory that holds go.mod.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = up
	}
}

// At names line i (0-based) as an editor does: "README.md:149".
func (d *Doc) At(i int) string { return fmt.Sprintf("%s:%d", d.Name, i+1) }

// Text is the whole document.
func (d *Doc) Text() string { return strings.Join(d.Lines, "\n") }

// Section returns the range [from, to) of the lines under the first heading
// whose text starts with title (any level), up to the next heading of the
// same or a higher level; ok false when there is none.
func (d *Doc) Section(title string) (from, to int, ok bool) {
	level := 0
	for i, l := range d.Lines {
		n := headingLevel(l)
		if level == 0 {
			if n > 0 && strings.HasPrefix(strings.TrimSpace(l[n:]), title) {
				level, from = n, i+1
			}
			continue
		}
		if n > 0 && n <= level {
			return from, i, true
		}
	}
	return from, len(d.Lines), level > 0
}

// Headings returns the text of every heading of the document.
func (d *Doc) Headings() []string {
	var hs []string
	for _, l := range d.Lines {
		if n := headingLevel(l); n > 0 {
			hs = append(hs, strings.TrimSpace(l[n:]))
		}
	}
	return hs
}

// headingLevel is the number of leading '#' of a Markdown heading line, 0
// for any other line.
func headingLevel(l string) int {
	n := len(l) - len(strings.TrimLeft(l, "#"))
	if n == 0 || n > 6 || len(l) == n || l[n] != ' ' {
		return 0
	}
	return n
}

// codeSpan is a `code span` of Markdown.
var codeSpan = regexp.MustCompile("`([^`]+)`")

// CodeSpans returns the code spans of s, without their backquotes.
func CodeSpans(s string) []string {
	var spans []string
	for _, m := range codeSpan.FindAllStringSubmatch(s, -1) {
		spans = append(spans, m[1])
	}
	return spans
}

// Command is one command of a command line's table.
type Command struct {
	Name string // "job start"
	Args string // its synopsis, as the program's usage prints it
}

// Line is how the document writes the command, in an indented code block:
// the program, the name and the synopsis.
func (c Command) Line(prog string) string {
	return strings.TrimSpace(prog + " " + c.Name + " " + c.Args)
}

// CheckCommands fails t for every command of table (the program prog's)
// that has no line "    PROG NAME ARGS" in d (a comment after "  #" may
// follow), and for every such line of d that names no command of table, so
// that the document's command list is the table, word for word.
func CheckCommands(t testing.TB, d *Doc, prog, table string, cmds []Command) {
	t.Helper()
	lines := map[int]string{}
	for i, l := range d.Lines {
		if strings.HasPrefix(l, "    "+prog+" ") {
			line, _, _ := strings.Cut(l, "  #")
			lines[i] = strings.Join(strings.Fields(line), " ")
		}
	}
	known := map[int]bool{}
	for _, c := range cmds {
		want := c.Line(prog)
		i := -1
		for j, l := range lines {
			if l == want {
				i = j
			}
		}
		if i < 0 {
			t.Errorf("%s lacks the line of the command %q of %s:\n    %s", d.Name, c.Name, table, want)
			continue
		}
		known[i] = true
	}
	for _, i := range slices.Sorted(maps.Keys(lines)) {
		if !known[i] {
			t.Errorf("%s: %q is not a command of %s as it stands there (name and synopsis)", d.At(i), lines[i], table)
		}
	}
}

// CheckProgram is CheckCommands over README.md for the command table of a
// program of internal/cmdutil (its help command aside), named table in the
// messages.
func CheckProgram[C any](t testing.TB, p *cmdutil.Program[C], table string) {
	t.Helper()
	var cmds []Command
	for _, c := range p.Commands {
		if c.Name != "help" {
			cmds = append(cmds, Command{Name: c.Name, Args: c.Args})
		}
	}
	CheckCommands(t, Read(t, "README.md"), p.Name, table, cmds)
}
