package docs

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	// heading is a numbered section of DESIGN.md: "## 5a. Title" or
	// "### 3.1 Title".
	heading = regexp.MustCompile(`^#{2,4} ([0-9]+[a-z]?(?:\.[0-9]+)*)\.? `)
	// citation is the one form a reference takes: docs/DESIGN.md §N, or
	// docs/DESIGN.md alone for the whole document.
	citation = regexp.MustCompile(`docs/DESIGN\.md(?: §([0-9]+[a-z]?(?:\.[0-9]+)*))?`)
	// loose is a section named in another form after the file name.
	loose = regexp.MustCompile(`^(?: ?§| [0-9]| section| sec\.)`)
	// mention is any word DESIGN, so that a reference in another form
	// ("DESIGN section 5", "DESIGN.md 3.3") is caught, not skipped.
	mention = regexp.MustCompile(`\bDESIGN\b`)
)

// sections returns the section numbers of DESIGN.md.
func sections(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open("DESIGN.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := heading.FindStringSubmatch(sc.Text()); m != nil {
			out[m[1]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCitationsResolve: every mention of the design document in the tree
// (code, comments, documents, configuration) is "docs/DESIGN.md" or a
// citation of the form "docs/DESIGN.md §N", and section N exists in
// docs/DESIGN.md.
func TestCitationsResolve(t *testing.T) {
	secs := sections(t)
	for _, want := range []string{"1", "2", "3.1", "3.2", "3.3", "3.4", "4", "5", "5a", "5b", "6", "6.1", "7"} {
		if !secs[want] {
			t.Errorf("DESIGN.md has no section %s", want)
		}
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	self, _ := filepath.Abs("design_test.go")
	cited := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "testdata", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".yaml", ".yml", ".toml", ".sh", ".proto", ".html", ".js":
		default:
			if filepath.Base(filepath.Dir(path)) != ".ci" {
				return nil
			}
		}
		if path == self {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for i, line := range strings.Split(string(data), "\n") {
			refs := citation.FindAllStringSubmatchIndex(line, -1)
			for _, r := range refs {
				if r[2] < 0 {
					if loose.MatchString(line[r[1]:]) {
						t.Errorf("%s:%d: names a section of docs/DESIGN.md in a form other than \"docs/DESIGN.md §N\": %s", rel, i+1, strings.TrimSpace(line))
					}
					continue
				}
				cited++
				if sec := line[r[2]:r[3]]; !secs[sec] {
					t.Errorf("%s:%d: cites docs/DESIGN.md §%s, which has no such section", rel, i+1, sec)
				}
			}
			for _, m := range mention.FindAllStringIndex(line, -1) {
				inCitation := false
				for _, r := range refs {
					if m[0] >= r[0] && m[1] <= r[1] {
						inCitation = true
					}
				}
				if !inCitation && rel != filepath.Join("docs", "DESIGN.md") {
					t.Errorf("%s:%d: mentions DESIGN but not as a citation \"docs/DESIGN.md §N\": %s", rel, i+1, strings.TrimSpace(line))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if cited < 10 {
		t.Errorf("found %d citations; the walk missed the tree", cited)
	}
}
