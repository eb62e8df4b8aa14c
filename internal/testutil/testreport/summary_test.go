package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// report runs the summarizer on input and returns its output and status.
func report(t *testing.T, input string, args ...string) (string, int) {
	t.Helper()
	var out, errOut strings.Builder
	code := run(args, strings.NewReader(input), &out, &errOut)
	if errOut.Len() > 0 {
		t.Logf("stderr: %s", errOut.String())
	}
	return out.String(), code
}

func fixture(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// A run of go test -json (Go 1.26) with a build failure, a failed test, a
// skipped test and a skipped subtest: what failed is printed as go test
// prints it, the skips with their messages, and the closing line.
func TestMixed(t *testing.T) {
	got, code := report(t, fixture(t, "mixed.json"))
	want := "# fixture/broken [fixture/broken.test]\n" +
		"broken/b_test.go:5:28: undefined: undefined\n" +
		"FAIL\tfixture/broken [build failed]\n" +
		"=== RUN   TestFail\n" +
		"    ok_test.go:6: some log\n" +
		"    ok_test.go:6: boom\n" +
		"--- FAIL: TestFail (0.00s)\n" +
		"FAIL\tfixture/ok\t0.022s\n" +
		"\nSkipped (2):\n" +
		"  fixture/ok TestSkip: ok_test.go:7: needs nft\n" +
		"  fixture/ok TestSub/b: ok_test.go:10: no chromium: x\n" +
		"\n3 passed, 2 failed, 2 skipped\n"
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
}

const passing = `{"Action":"start","Package":"m/a"}
{"Action":"run","Package":"m/a","Test":"TestA"}
{"Action":"output","Package":"m/a","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"m/a","Test":"TestA","Output":"--- PASS: TestA (0.00s)\n"}
{"Action":"pass","Package":"m/a","Test":"TestA","Elapsed":0}
{"Action":"output","Package":"m/a","Output":"PASS\n"}
{"Action":"output","Package":"m/a","Output":"ok  \tm/a\t0.015s\n"}
{"Action":"pass","Package":"m/a","Elapsed":0.015}
{"Action":"start","Package":"m/b"}
{"Action":"output","Package":"m/b","Output":"?   \tm/b\t[no test files]\n"}
{"Action":"skip","Package":"m/b","Elapsed":0}
`

func TestPassing(t *testing.T) {
	got, code := report(t, passing)
	want := "ok  \tm/a\t0.015s\n?   \tm/b\t[no test files]\n1 passed, 0 failed, 0 skipped\n"
	if got != want || code != 0 {
		t.Errorf("exit %d, got:\n%s\nwant:\n%s", code, got, want)
	}
}

// A test binary that dies in a test (a panic, or -timeout): the test never
// ends, its output and the package's (the panic) are printed, and it counts
// as failed.
func TestPanicInTest(t *testing.T) {
	in := `{"Action":"start","Package":"m/c"}
{"Action":"run","Package":"m/c","Test":"TestSlow"}
{"Action":"output","Package":"m/c","Test":"TestSlow","Output":"=== RUN   TestSlow\n"}
{"Action":"output","Package":"m/c","Output":"panic: test timed out after 1s\n"}
{"Action":"output","Package":"m/c","Output":"\trunning tests:\n"}
{"Action":"output","Package":"m/c","Output":"FAIL\tm/c\t1.005s\n"}
{"Action":"fail","Package":"m/c","Elapsed":1.005}
`
	got, code := report(t, in)
	want := "=== RUN   TestSlow\npanic: test timed out after 1s\n\trunning tests:\nFAIL\tm/c\t1.005s\n0 passed, 1 failed, 0 skipped\n"
	if got != want || code != 1 {
		t.Errorf("exit %d, got:\n%s\nwant:\n%s", code, got, want)
	}
}

// Lines that are not events pass through; an input cut short fails the
// package that was running; no events at all is a failure, not a pass.
func TestOddInputs(t *testing.T) {
	got, code := report(t, "go: downloading example.com/x v1.0.0\n"+passing)
	if !strings.HasPrefix(got, "go: downloading example.com/x v1.0.0\n") || code != 0 {
		t.Errorf("passthrough: exit %d, %q", code, got)
	}
	cut := `{"Action":"run","Package":"m/d","Test":"TestD"}
{"Action":"output","Package":"m/d","Test":"TestD","Output":"=== RUN   TestD\n"}`
	got, code = report(t, cut)
	if !strings.HasSuffix(got, "0 passed, 1 failed, 0 skipped\n") || !strings.Contains(got, "FAIL\tm/d") || code != 1 {
		t.Errorf("cut: exit %d, %q", code, got)
	}
	got, code = report(t, "")
	if !strings.Contains(got, "no test events") || !strings.HasSuffix(got, "0 passed, 0 failed, 0 skipped\n") || code != 1 {
		t.Errorf("empty: exit %d, %q", code, got)
	}
}

// With a command, its exit status counts: all events passing but a failed
// command is a failure.
func TestCommand(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.json")
	if err := os.WriteFile(path, []byte(passing), 0o644); err != nil {
		t.Fatal(err)
	}
	got, code := report(t, "", "--", "sh", "-c", `cat "$0"; exit 3`, path)
	if !strings.Contains(got, "the command exited with status 3") || !strings.HasSuffix(got, "1 passed, 1 failed, 0 skipped\n") || code != 1 {
		t.Errorf("exit %d, %q", code, got)
	}
	if got, code = report(t, "", "sh", "-c", `cat "$0"`, path); code != 0 || !strings.HasSuffix(got, "1 passed, 0 failed, 0 skipped\n") {
		t.Errorf("exit %d, %q", code, got)
	}
	if _, code = report(t, "", filepath.Join(t.TempDir(), "missing")); code != 2 {
		t.Errorf("a missing command: exit %d, want 2", code)
	}
}

// The real go test on the fixture module (testdata/fixture): the counts
// and the skip messages come through as the Go in use writes its events.
func TestRealGoTest(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	dir, err := filepath.Abs(filepath.Join("testdata", "fixture"))
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	cmd := []string{"sh", "-c", `cd "$0" && GOWORK=off GOFLAGS=-mod=mod exec "$1" test -json -count=1 ./...`, dir, goTool}
	code := run(cmd, strings.NewReader(""), &out, &errOut)
	got := out.String()
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^FAIL\tfixture/broken \[build failed\]$`),
		regexp.MustCompile(`(?m)^--- FAIL: TestFail `),
		regexp.MustCompile(`(?m)^\?   \tfixture/empty\t\[no test files\]$`),
		regexp.MustCompile(`(?m)^  fixture/ok TestSkip: ok_test.go:\d+: needs nft$`),
		regexp.MustCompile(`(?m)^  fixture/ok TestSub/b: ok_test.go:\d+: no chromium: x$`),
		regexp.MustCompile(`\n3 passed, 2 failed, 2 skipped\n$`),
	} {
		if !want.MatchString(got) {
			t.Errorf("output lacks %s:\n%s\nstderr:\n%s", want, got, errOut.String())
		}
	}
}

// A skip reason is the skip's own message, never the log before it, on one
// bounded line.
func TestSkipReason(t *testing.T) {
	long := strings.Repeat("x", 2*maxSkipReason)
	for _, tt := range []struct {
		name   string
		output []string
		want   string
	}{
		{"message only", []string{"=== RUN   TestA\n", "    a_test.go:7: needs nft\n", "--- SKIP: TestA (0.00s)\n"}, "a_test.go:7: needs nft"},
		{"log before the skip", []string{
			"=== RUN   TestA\n",
			"    a_test.go:10: agent n1 started\n",
			"    a_test.go:11: aggregator log:\n",
			"        line one\n",
			"        line two\n",
			"    a_test.go:40: no chromium on PATH\n",
			"--- SKIP: TestA (1.20s)\n",
		}, "a_test.go:40: no chromium on PATH"},
		{"a message of several lines", []string{"    a_test.go:10: a log\n", "    a_test.go:12: no FUSE:\n", "        open /dev/fuse: no such file\n", "--- SKIP: TestA (0.00s)\n"},
			"a_test.go:12: no FUSE: open /dev/fuse: no such file"},
		{"output that is not a log entry", []string{"=== RUN   TestA\n", "some program's line\n", "--- SKIP: TestA (0.00s)\n"}, "some program's line"},
		{"no message", []string{"=== RUN   TestA\n", "--- SKIP: TestA (0.00s)\n"}, "(no message)"},
		{"too long", []string{"    a_test.go:7: " + long + "\n"}, ("a_test.go:7: " + long)[:maxSkipReason-1] + "…"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := skipReason(tt.output); got != tt.want {
				t.Errorf("skipReason = %q, want %q", got, tt.want)
			}
		})
	}
}

// The top-level tests that took 30 s or more are listed slowest first, at
// most ten; subtests and quicker tests are not.
func TestSlowest(t *testing.T) {
	var in strings.Builder
	for i := range 12 {
		fmt.Fprintf(&in, `{"Action":"pass","Package":"m/a","Test":"TestT%d","Elapsed":%d}`+"\n", i, 25+5*i)
	}
	in.WriteString(`{"Action":"pass","Package":"m/a","Test":"TestT11/sub","Elapsed":900}` + "\n")
	in.WriteString(`{"Action":"pass","Package":"m/a","Elapsed":1000}` + "\n")
	got, code := report(t, in.String())
	want := "ok  \tm/a\t1000.000s\n" +
		"Slowest tests (11 took 30s or more; at most 10 listed):\n"
	for i := 11; i >= 2; i-- {
		want += fmt.Sprintf("  %7.1fs m/a TestT%d\n", float64(25+5*i), i)
	}
	want += "\n13 passed, 0 failed, 0 skipped\n"
	if got != want || code != 0 {
		t.Errorf("exit %d, got:\n%s\nwant:\n%s", code, got, want)
	}
}

// Several commands separated by ::: run at once into one summary: one
// package split between two commands is two packages with a line each, and
// its tests are counted once each; any command's failure fails the whole.
func TestSeveralCommands(t *testing.T) {
	dir := t.TempDir()
	write := func(name, events string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(events), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	a := write("a.json", `{"Action":"run","Package":"m/e2e","Test":"TestA"}
{"Action":"pass","Package":"m/e2e","Test":"TestA","Elapsed":40}
{"Action":"output","Package":"m/e2e","Output":"ok  \tm/e2e\t41.0s\n"}
{"Action":"pass","Package":"m/e2e","Elapsed":41}
`)
	b := write("b.json", `{"Action":"run","Package":"m/e2e","Test":"TestB"}
{"Action":"output","Package":"m/e2e","Test":"TestB","Output":"    b_test.go:9: needs slurm\n"}
{"Action":"skip","Package":"m/e2e","Test":"TestB","Elapsed":0}
{"Action":"run","Package":"m/e2e","Test":"TestC"}
{"Action":"pass","Package":"m/e2e","Test":"TestC","Elapsed":1}
{"Action":"output","Package":"m/e2e","Output":"ok  \tm/e2e\t2.0s\n"}
{"Action":"pass","Package":"m/e2e","Elapsed":2}
`)
	cat := func(path string, status int) []string {
		return []string{"sh", "-c", fmt.Sprintf(`cat "$0"; exit %d`, status), path}
	}
	args := append(append(cat(a, 0), ":::"), cat(b, 0)...)
	got, code := report(t, "", args...)
	for _, want := range []string{"ok  \tm/e2e\t41.0s\n", "ok  \tm/e2e\t2.0s\n", "  m/e2e TestB: b_test.go:9: needs slurm\n",
		"     40.0s m/e2e TestA\n", "\n2 passed, 0 failed, 1 skipped\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if code != 0 {
		t.Errorf("exit %d, want 0", code)
	}
	args = append(append(cat(a, 0), ":::"), cat(b, 3)...)
	if got, code = report(t, "", args...); code != 1 || !strings.Contains(got, "the command exited with status 3") {
		t.Errorf("one command failed: exit %d, %q", code, got)
	}
	for _, bad := range [][]string{{"true", ":::"}, {":::", "true"}, {"true", ":::", ":::", "true"}} {
		if _, code := report(t, "", bad...); code != 2 {
			t.Errorf("%q: exit %d, want 2", bad, code)
		}
	}
	if _, code := report(t, "", "true", ":::", filepath.Join(dir, "missing")); code != 2 {
		t.Errorf("a missing second command: exit %d, want 2", code)
	}
}
