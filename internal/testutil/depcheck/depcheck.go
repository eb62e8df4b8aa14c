// Package depcheck holds a program's dependencies to an allowlist: a test
// that fails when a new package of this module or a new third-party module
// appears in `go list -deps` of the program, so that a heavy dependency
// (the agent's kernel code in a client, a server library in a command an
// exec system starts for every job) cannot come in unnoticed.
package depcheck

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// Module is this module's path.
const Module = "github.com/gracewatch/gracewatch"

// Allow is what a program may link.
type Allow struct {
	// Packages are the packages of this module it may link, relative to
	// Module ("agent/api"; "" is none).
	Packages []string
	// Modules are the third-party modules it may link (module paths).
	Modules []string
	// Never are packages of this module it must never link, relative to
	// Module; listing one of them in Packages is itself an error, so that
	// widening the allowlist cannot let them in quietly.
	Never []string
	// NeverStd are standard library packages it must never link
	// ("net/http": its initialisation and size are a client's start time).
	NeverStd []string
}

// Check runs `go list -deps` on the package in dir (".": the test's own)
// and fails t for every dependency that a is not allowing.
func Check(t *testing.T, dir string, a Allow) {
	t.Helper()
	for _, n := range a.Never {
		if slices.Contains(a.Packages, n) {
			t.Errorf("the allowlist lets in %s, which this program must never link", n)
		}
	}
	cmd := exec.Command(testutil.GoTool(), "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}} {{with .Module}}{{.Path}}{{end}}{{end}}", ".")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	self := exec.Command(testutil.GoTool(), "list", ".")
	self.Dir = dir
	selfOut, err := self.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, mod, _ := strings.Cut(line, " ")
		if pkg == "" || pkg == strings.TrimSpace(string(selfOut)) {
			continue
		}
		seen++
		if mod == Module {
			rel := strings.TrimPrefix(strings.TrimPrefix(pkg, Module), "/")
			if slices.Contains(a.Never, rel) {
				t.Errorf("links %s, which it must never link", pkg)
			} else if !slices.Contains(a.Packages, rel) && !strings.HasPrefix(rel, "cmd/") {
				t.Errorf("links %s, which is not on its allowlist: if it belongs there, add it to the test", pkg)
			}
			continue
		}
		if !slices.Contains(a.Modules, mod) {
			t.Errorf("links %s of module %s, which is not on its allowlist: if it belongs there, add it to the test", pkg, mod)
		}
	}
	if seen == 0 && len(a.Packages)+len(a.Modules) > 0 {
		t.Fatal("go list -deps listed nothing")
	}
	if len(a.NeverStd) == 0 {
		return
	}
	std := exec.Command(testutil.GoTool(), "list", "-deps", "-f", "{{if .Standard}}{{.ImportPath}}{{end}}", ".")
	std.Dir = dir
	stdOut, err := std.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(stdOut)) {
		if slices.Contains(a.NeverStd, pkg) {
			t.Errorf("links the standard library's %s, which it must never link", pkg)
		}
	}
}
