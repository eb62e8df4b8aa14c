// Package suitecheck holds the rules that keep the test suite and the
// repository honest as a whole, checked by its own tests: no test waits a
// fixed time for something to happen (every time.Sleep in a test names why it
// is the scenario and not a wait), and no build output is tracked in git.
package suitecheck

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Marker is what a comment on a time.Sleep's line, or on the line just
// above it, must hold for the sleep to be allowed in a test: the words
// that follow say why the time itself is the case under test (the spacing
// of two signals, a benchmark's measurement window, a paced load), never
// a wait for something to happen, which testutil.Poll and Eventually do.
const Marker = "not a wait:"

// MaxTrackedSize is the largest file git may track: anything larger is a
// build output, a core file or a data set that belongs elsewhere.
const MaxTrackedSize = 1 << 20

// Sleep is a time.Sleep call that lacks its Marker.
type Sleep struct {
	File string
	Line int
}

func (s Sleep) String() string { return fmt.Sprintf("%s:%d", s.File, s.Line) }

// UnmarkedSleeps parses every Go test file under root (and every file of
// internal/testutil but the poller itself) and returns the time.Sleep calls
// that carry no Marker comment, with paths relative to root. Folders named
// testdata, vendor or starting with a dot are not read.
func UnmarkedSleeps(root string) ([]Sleep, error) {
	var out []Sleep
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if !inScope(filepath.ToSlash(rel)) {
			return nil
		}
		found, err := fileSleeps(path)
		if err != nil {
			return err
		}
		for _, line := range found {
			out = append(out, Sleep{File: filepath.ToSlash(rel), Line: line})
		}
		return nil
	})
	return out, err
}

// inScope says whether a file (slash-separated, relative to the module's
// root) is test code: a _test.go file, or a test helper package's file.
func inScope(rel string) bool {
	if !strings.HasSuffix(rel, ".go") {
		return false
	}
	if strings.HasSuffix(rel, "_test.go") {
		return true
	}
	return strings.HasPrefix(rel, "internal/testutil/") && rel != "internal/testutil/poll.go"
}

// fileSleeps returns the lines of the unmarked time.Sleep calls of one file.
func fileSleeps(path string) ([]int, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	timeName := ""
	for _, imp := range f.Imports {
		if imp.Path.Value != `"time"` {
			continue
		}
		timeName = "time"
		if imp.Name != nil {
			timeName = imp.Name.Name
		}
	}
	if timeName == "" || timeName == "_" {
		return nil, nil
	}
	marked := map[int]bool{}
	for _, cg := range f.Comments {
		// A comment of several lines is one group: its marker may be on
		// any of them. It marks its own lines and the line after its end.
		if strings.Contains(strings.Join(strings.Fields(strings.ToLower(cg.Text())), " "), Marker) {
			from, to := fset.Position(cg.Pos()).Line, fset.Position(cg.End()).Line
			for l := from; l <= to+1; l++ {
				marked[l] = true
			}
		}
	}
	var lines []int
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Sleep" {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); !ok || id.Name != timeName {
			return true
		}
		if line := fset.Position(call.Pos()).Line; !marked[line] {
			lines = append(lines, line)
		}
		return true
	})
	return lines, nil
}

// Tracked is a file git tracks that is a build output or too large.
type Tracked struct {
	Path string
	Why  string
}

// BadTracked returns the tracked files (paths relative to root, as
// `git ls-files -z` prints them into list) that are executables of a
// compiler (ELF, Mach-O, PE) or larger than MaxTrackedSize. Symbolic links
// and files listed but missing from the work tree are passed over.
func BadTracked(root string, list []byte) ([]Tracked, error) {
	var bad []Tracked
	for _, name := range bytes.Split(list, []byte{0}) {
		if len(name) == 0 {
			continue
		}
		rel := string(name)
		path := filepath.Join(root, rel)
		fi, err := os.Lstat(path)
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			return nil, err
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		if fi.Size() > MaxTrackedSize {
			bad = append(bad, Tracked{rel, fmt.Sprintf("%d bytes, over %d", fi.Size(), MaxTrackedSize)})
			continue
		}
		if kind, err := executableKind(path); err != nil {
			return nil, err
		} else if kind != "" {
			bad = append(bad, Tracked{rel, "a compiled executable (" + kind + ")"})
		}
	}
	return bad, nil
}

// executableKind names the object format a file starts with, or "".
func executableKind(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	head := make([]byte, 4)
	n, _ := f.Read(head)
	head = head[:n]
	switch {
	case bytes.HasPrefix(head, []byte("\x7fELF")):
		return "ELF", nil
	case bytes.HasPrefix(head, []byte{0xcf, 0xfa, 0xed, 0xfe}), bytes.HasPrefix(head, []byte{0xfe, 0xed, 0xfa, 0xcf}),
		bytes.HasPrefix(head, []byte{0xca, 0xfe, 0xba, 0xbe}):
		return "Mach-O", nil
	case bytes.HasPrefix(head, []byte("MZ")):
		return "PE", nil
	}
	return "", nil
}
