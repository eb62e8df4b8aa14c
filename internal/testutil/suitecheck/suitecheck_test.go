package suitecheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// moduleRoot is the folder of this module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's folder")
		}
		dir = parent
	}
}

// TestNoSleepAsWait holds the whole suite to waiting for events: a test
// that sleeps a fixed time for something to happen passes on a fast machine
// and fails on a slow one, or (a wait for nothing to happen) passes on a
// slow one when it should fail. testutil.Poll and Eventually wait for the
// event; a sleep that is itself the scenario says so with Marker.
func TestNoSleepAsWait(t *testing.T) {
	sleeps, err := UnmarkedSleeps(moduleRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sleeps {
		t.Errorf("%s: time.Sleep in test code without a %q comment: wait for the event (testutil.Poll, testutil.Eventually), or say why the time is the scenario", s, Marker)
	}
}

// TestNoBuildOutputTracked fails when git tracks a compiled executable or a
// file over MaxTrackedSize.
func TestNoBuildOutputTracked(t *testing.T) {
	root := moduleRoot(t)
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("git ls-files in %s: %v", root, err)
		}
		t.Skipf("not a git work tree (git ls-files: %v)", err)
	}
	bad, err := BadTracked(root, out)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		t.Errorf("%s is tracked in git: %s; build outputs go to bin/ or dist/ (ignored)", b.Path, b.Why)
	}
}

func write(t *testing.T, dir, rel, text string) {
	t.Helper()
	path := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestUnmarkedSleeps(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a/a_test.go", `package a

import (
	"testing"
	"time"
)

func TestA(t *testing.T) {
	time.Sleep(time.Second)
	time.Sleep(time.Second) // Not a wait: the spacing is the case.
	// not a wait: a measurement window
	time.Sleep(time.Second)
	// not a wait: a comment two lines up does not count

	// Not a wait: a comment of two lines
	// marks the line after its end.
	time.Sleep(time.Second)

	time.Sleep(time.Second)
	go func() { time.Sleep(1) }()
}
`)
	write(t, dir, "b/b_test.go", `package b

import clock "time"

func f() { clock.Sleep(1) }
`)
	write(t, dir, "c/c.go", "package c\n\nimport \"time\"\n\nfunc f() { time.Sleep(1) }\n")
	write(t, dir, "internal/testutil/x/x.go", "package x\n\nimport \"time\"\n\nfunc f() { time.Sleep(1) }\n")
	write(t, dir, "internal/testutil/poll.go", "package testutil\n\nimport \"time\"\n\nfunc f() { time.Sleep(1) }\n")
	write(t, dir, "d/testdata/d_test.go", "package d\n\nimport \"time\"\n\nfunc f() { time.Sleep(1) }\n")
	write(t, dir, "e/e_test.go", "package e\n\nimport \"time\"\n\ntype s struct{}\n\nfunc (s) Sleep(int) {}\n\nfunc f() { var time s; time.Sleep(1) }\n")
	got, err := UnmarkedSleeps(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range got {
		names = append(names, s.String())
	}
	// e_test.go's shadowed name is a false positive the parser cannot
	// tell apart without type checking; the rule is written for the
	// suite as it is, where no test shadows the package name.
	want := []string{"a/a_test.go:9", "a/a_test.go:19", "a/a_test.go:20", "b/b_test.go:5", "e/e_test.go:9", "internal/testutil/x/x.go:5"}
	if !slices.Equal(names, want) {
		t.Errorf("UnmarkedSleeps = %v, want %v", names, want)
	}

	write(t, dir, "f/f_test.go", "package f\n\nfunc f() { not go }\n")
	if _, err := UnmarkedSleeps(dir); err == nil || !strings.Contains(err.Error(), "f_test.go") {
		t.Errorf("a file that does not parse: err %v, want one naming it", err)
	}
}

func TestBadTracked(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "script.sh", "#!/bin/sh\necho hi\n")
	write(t, dir, "bin", "\x7fELF\x02\x01\x01")
	write(t, dir, "app.exe", "MZ\x90\x00")
	write(t, dir, "macho", "\xcf\xfa\xed\xfe")
	write(t, dir, "big.dat", strings.Repeat("x", MaxTrackedSize+1))
	write(t, dir, "edge.dat", strings.Repeat("x", MaxTrackedSize))
	write(t, dir, "empty", "")
	if err := os.Symlink("bin", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	list := strings.Join([]string{"script.sh", "bin", "app.exe", "macho", "big.dat", "edge.dat", "empty", "link", "gone"}, "\x00") + "\x00"
	bad, err := BadTracked(dir, []byte(list))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range bad {
		got = append(got, b.Path)
	}
	want := []string{"bin", "app.exe", "macho", "big.dat"}
	if !slices.Equal(got, want) {
		t.Errorf("BadTracked = %v, want %v", got, want)
	}
}
