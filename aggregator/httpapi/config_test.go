package httpapi

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeToken(t *testing.T, dir, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadToken(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string { return writeToken(t, dir, name, content, mode) }
	if tok, err := LoadToken(write("ok", testToken+"\n", 0o600)); err != nil || string(tok) != testToken {
		t.Errorf("LoadToken = %q, %v", tok, err)
	}
	if _, err := LoadToken(write("group", testToken, 0o640)); err != nil {
		t.Errorf("group-readable token refused: %v", err)
	}
	for name, c := range map[string]struct {
		content string
		mode    os.FileMode
		want    string
	}{
		"world": {testToken, 0o644, "mode 0644 is too open"},
		"short": {"abc", 0o600, "want at least 16"},
		"lines": {"abcdefghijklmnop\nqrstuvwxyz", 0o600, "one line"},
	} {
		if _, err := LoadToken(write(name, c.content, c.mode)); err == nil || !strings.Contains(err.Error(), c.want) ||
			!strings.Contains(err.Error(), filepath.Join(dir, name)) {
			t.Errorf("%s: err = %v, want %q and the path", name, err, c.want)
		}
	}
	if _, err := LoadToken(dir); err == nil {
		t.Error("a directory accepted")
	}
	if _, err := LoadToken(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// TestLoadTokens: both files by LoadToken's rules, errors naming the key,
// and a read token equal to the admin token refused.
func TestLoadTokens(t *testing.T) {
	dir := t.TempDir()
	adminFile := writeToken(t, dir, "admin.token", testToken+"\n", 0o600)
	readFile := writeToken(t, dir, "read.token", testReadToken+"\n", 0o640)
	sameFile := writeToken(t, dir, "same.token", testToken, 0o640)
	worldFile := writeToken(t, dir, "world.token", testReadToken, 0o644)

	admin, read, err := Config{AdminTokenFile: adminFile, ReadTokenFile: readFile}.LoadTokens()
	if err != nil || string(admin) != testToken || string(read) != testReadToken {
		t.Errorf("LoadTokens = %q, %q, %v", admin, read, err)
	}
	if admin, read, err := (Config{}).LoadTokens(); err != nil || admin != nil || read != nil {
		t.Errorf("no files: %q, %q, %v", admin, read, err)
	}
	if _, read, err := (Config{ReadTokenFile: readFile}).LoadTokens(); err != nil || string(read) != testReadToken {
		t.Errorf("read token only: %q, %v", read, err)
	}
	for _, c := range []struct {
		name string
		h    Config
		want string
	}{
		{"same token", Config{AdminTokenFile: adminFile, ReadTokenFile: sameFile}, `key "http.read_token_file": http.read_token_file holds the same token`},
		{"read file open to others", Config{AdminTokenFile: adminFile, ReadTokenFile: worldFile}, `key "http.read_token_file": token file ` + worldFile + `: mode 0644`},
		{"admin file open to others", Config{AdminTokenFile: worldFile, ReadTokenFile: readFile}, `key "http.admin_token_file": token file ` + worldFile},
		{"missing read file", Config{ReadTokenFile: filepath.Join(dir, "nope")}, `key "http.read_token_file": token file: open ` + filepath.Join(dir, "nope")},
	} {
		if _, _, err := c.h.LoadTokens(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
	if _, _, err := (Config{AdminTokenFile: adminFile, ReadTokenFile: sameFile}).LoadTokens(); !errors.Is(err, ErrSameToken) {
		t.Errorf("same token: %v, want ErrSameToken", err)
	}
}
