package config

import (
	"errors"
	"testing"
)

// Problems names each key under its prefix, counts each error of an
// included join on its own, and InFile places every one at its line.
func TestProblems(t *testing.T) {
	var p Problems
	if p.Err() != nil {
		t.Fatal("no problem, yet an error")
	}
	http := Problems{Prefix: "http"}
	http.Add("listen", "want host:port, got %q", "x")
	http.Add("max_watchers", "want 0 to %d, got %d", 10, 11)
	p.Add("name", "empty")
	p.Include(http.Err())
	p.Include(nil)
	p.Include(errors.New("mesh.keyring: required"))
	data := []byte("name = \"\"\n[http]\nlisten = \"x\"\nmax_watchers = 11\n")
	got := InFile("a.toml", data, p.Err()).Error()
	want := `a.toml:1: key "name": empty` + "\n" +
		`a.toml:3: key "http.listen": want host:port, got "x"` + "\n" +
		`a.toml:4: key "http.max_watchers": want 0 to 10, got 11` + "\n" +
		"a.toml: mesh.keyring: required"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
