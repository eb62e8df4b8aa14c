package testutil

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Golden compares got with the golden file at path; with update (a test
// package's -update flag) it writes got there instead, making its folder.
// A difference fails t with the first line that differs and the lines
// only in the file (-) or only in got (+). The /metrics and diagnostics
// report tests keep their expected output this way.
func Golden(t testing.TB, path string, got []byte, update bool) {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("got differs from %s (run with -update if the change is intended)\n%s", path, GoldenDiff(string(want), string(got)))
	}
}

// GoldenDiff says where got first differs from want (the line number, and
// the two lines), then lists the lines only in want (-) and only in got
// (+): a metric added among hundreds shows as one + line, a changed field
// of a report as its line in each. It returns "" when they are equal.
func GoldenDiff(want, got string) string {
	if want == got {
		return ""
	}
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := 0; i < len(w) || i < len(g); i++ {
		var a, c string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			c = g[i]
		}
		if a != c {
			fmt.Fprintf(&b, "first difference at line %d:\n want %s\n got  %s\n", i+1, a, c)
			break
		}
	}
	in := func(lines []string) map[string]bool {
		m := make(map[string]bool, len(lines))
		for _, l := range lines {
			m[l] = true
		}
		return m
	}
	inWant, inGot := in(w), in(g)
	for _, l := range w {
		if !inGot[l] {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range g {
		if !inWant[l] {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}
