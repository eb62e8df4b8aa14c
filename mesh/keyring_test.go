package mesh

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKeyFileRoundTrip(t *testing.T) {
	p := filepath.Join(t.TempDir(), "mesh.key")
	if err := WriteKeyFile(p); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %#o, want 0600", fi.Mode().Perm())
	}
	data, _ := os.ReadFile(p)
	key, err := base64.StdEncoding.DecodeString(strings.TrimSuffix(string(data), "\n"))
	if err != nil || len(key) != 32 || !strings.HasSuffix(string(data), "\n") {
		t.Fatalf("file %q: %v", data, err)
	}
	kr, err := LoadKeyring(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(kr.GetPrimaryKey(), key) {
		t.Error("primary key differs from the file's")
	}

	err = WriteKeyFile(p)
	if !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), "refusing to overwrite") {
		t.Errorf("second WriteKeyFile = %v, want a refusal wrapping fs.ErrExist", err)
	}
	if again, _ := os.ReadFile(p); !bytes.Equal(again, data) {
		t.Error("the key file changed")
	}
}

func TestLoadKeyring(t *testing.T) {
	k16 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 16))
	k24 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 24))
	k32 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{3}, 32))
	cases := []struct {
		name    string
		content string
		mode    os.FileMode
		want    string // error substring; "" = success
		keys    int
	}{
		{"three keys, comments", "# rotated 2025-01\n" + k32 + "\n\n  " + k16 + "  # old\n" + k24 + "\n", 0o600, "", 3},
		{"group readable is fine", k32 + "\n", 0o640, "", 1},
		{"no final newline", k32, 0o400, "", 1},
		{"readable by others", k32 + "\n", 0o644, ": mode 0644 is too open", 0},
		{"group writable", k32 + "\n", 0o620, ": mode 0620 is too open", 0},
		{"writable by others", k32 + "\n", 0o602, ": mode 0602 is too open", 0},
		{"malformed base64", "# c\n\n" + k32 + "\nnot*base64!\n", 0o600, "line 4: not base64", 0},
		{"wrong length", base64.StdEncoding.EncodeToString([]byte("0123456789")) + "\n", 0o600, "line 1: key is 10 bytes, want 16, 24 or 32", 0},
		{"empty", "# nothing\n\n", 0o600, "no entry", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "k")
			if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, tc.mode); err != nil {
				t.Fatal(err)
			}
			kr, err := LoadKeyring(p)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if n := len(kr.GetKeys()); n != tc.keys {
					t.Errorf("%d keys, want %d", n, tc.keys)
				}
				return
			}
			if err == nil || !contains(err.Error(), tc.want, p) {
				t.Errorf("LoadKeyring = %v, want an error naming %s and containing %q", err, p, tc.want)
			}
		})
	}
	t.Run("primary is the first", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "k")
		os.WriteFile(p, []byte(k16+"\n"+k32+"\n"), 0o600)
		kr, err := LoadKeyring(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(kr.GetPrimaryKey(), bytes.Repeat([]byte{1}, 16)) {
			t.Error("primary is not the first key")
		}
	})
	t.Run("directory", func(t *testing.T) {
		d := t.TempDir()
		if _, err := LoadKeyring(d); err == nil || !contains(err.Error(), d, "not a regular file") {
			t.Errorf("LoadKeyring(dir) = %v", err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		if _, err := LoadKeyring("/nonexistent/k"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("LoadKeyring(missing) = %v", err)
		}
	})
}
