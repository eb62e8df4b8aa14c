package doccheck

import (
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// citing are the documents whose citations of BENCHMARKS.md are checked.
var citing = []string{"README.md", "docs/DESIGN.md", "packaging/README.md", "packaging/lintian-triage.md"}

// figure is a measured figure as the documents write them: a number (a
// range of two) and its unit.
var figure = regexp.MustCompile(`\d+(?:[.,]\d+)*(?:[–-]\d+(?:[.,]\d+)*)?\s?(?:ms|µs|s|min|MiB|MB|KiB|KB|GiB|B/s|%|CPU-s/h(?:our)?)(?:[^\pL]|$)`)

// sectionCited is the title a citation names: BENCHMARKS.md, "Title" or
// BENCHMARKS.md "Title" (the title may be cut by a line break).
var sectionCited = regexp.MustCompile(`BENCHMARKS\.md,?\s+"([^"]+)"`)

// sentences splits a paragraph into sentences, at a stop followed by a
// space and an upper-case letter.
var sentenceEnd = regexp.MustCompile(`[.!?]\)?\s+[A-Z\x60(]`)

// citations returns, for each sentence of doc that cites BENCHMARKS.md
// (or row of a table), the sentence (its lines joined) and the line it
// starts on.
func citations(doc *Doc) (sentences []string, lines []int) {
	var para string
	var starts []int // starts[k]: the offset in para of the paragraph's line k
	first := 0       // the paragraph's first line
	flush := func() {
		off := 0
		for off < len(para) {
			cut := len(para)
			if m := sentenceEnd.FindStringIndex(para[off:]); m != nil {
				cut = off + m[0] + 1
			}
			if s := para[off:cut]; strings.Contains(s, "BENCHMARKS.md") {
				k := 0
				for k+1 < len(starts) && starts[k+1] <= off {
					k++
				}
				sentences, lines = append(sentences, strings.TrimSpace(s)), append(lines, first+k)
			}
			off = cut
		}
		para, starts = "", nil
	}
	for i, l := range doc.Lines {
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "|") || strings.HasPrefix(l, "    ") {
			flush()
			if strings.HasPrefix(l, "|") && strings.Contains(l, "BENCHMARKS.md") {
				sentences, lines = append(sentences, l), append(lines, i)
			}
			first = i + 1
			continue
		}
		starts = append(starts, len(para))
		para += strings.TrimSpace(l) + " "
	}
	flush()
	return sentences, lines
}

// TestCitedFiguresAreInBENCHMARKS: every figure that a sentence citing
// BENCHMARKS.md states is in BENCHMARKS.md, word for word, and every
// section such a sentence names is a heading there, so that a reader who
// follows the citation finds both.
func TestCitedFiguresAreInBENCHMARKS(t *testing.T) {
	bench := Read(t, "BENCHMARKS.md")
	text := strings.Join(strings.Fields(bench.Text()), " ")
	headings := bench.Headings()
	for _, name := range citing {
		doc := Read(t, name)
		sentences, lines := citations(doc)
		for k, s := range sentences {
			for _, f := range figure.FindAllString(s, -1) {
				f = strings.TrimRightFunc(f, func(r rune) bool { return !strings.ContainsRune("0123456789smBh%", r) })
				if !strings.Contains(text, f) {
					t.Errorf("%s: cites %q, which BENCHMARKS.md does not hold:\n%s", doc.At(lines[k]), f, s)
				}
			}
			for _, m := range sectionCited.FindAllStringSubmatch(s, -1) {
				title := strings.Join(strings.Fields(m[1]), " ")
				found := false
				for _, h := range headings {
					found = found || strings.HasPrefix(h, title)
				}
				if !found {
					t.Errorf("%s: cites the section %q of BENCHMARKS.md, which has no heading that starts so", doc.At(lines[k]), title)
				}
			}
		}
	}
}

// maxBenchmarkLines bounds BENCHMARKS.md: the current figures only; the
// methods in full and the figures they replaced go to
// docs/benchmarks-history.md.
const maxBenchmarkLines = 500

// TestBENCHMARKSLeadsWithEveryTarget: BENCHMARKS.md's first table, under
// "Targets", links to every section of a target (all but "Anchors"), so a
// reader finds each target's current figure there, and the file stays
// short enough to read.
func TestBENCHMARKSLeadsWithEveryTarget(t *testing.T) {
	bench := Read(t, "BENCHMARKS.md")
	if n := len(bench.Lines); n > maxBenchmarkLines {
		t.Errorf("BENCHMARKS.md has %d lines, more than %d: move superseded figures and long methods to docs/benchmarks-history.md", n, maxBenchmarkLines)
	}
	from, to, ok := bench.Section("Targets")
	if !ok {
		t.Fatal("BENCHMARKS.md has no section \"Targets\" (the table of every target)")
	}
	table := strings.Join(bench.Lines[from:to], "\n")
	for i, l := range bench.Lines[to:] {
		title, ok := strings.CutPrefix(l, "## ")
		if !ok || title == "Anchors" {
			continue
		}
		if !strings.Contains(table, "](#"+anchor(title)+")") {
			t.Errorf("%s: the section %q has no row in the table of \"Targets\" (a link to #%s)", bench.At(to+i), title, anchor(title))
		}
	}
}

// anchor is the fragment that GitHub gives a heading: lower case, spaces to
// hyphens, punctuation but hyphens and underscores dropped.
func anchor(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
