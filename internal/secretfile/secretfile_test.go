package secretfile

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func write(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// Every permission bit the policy forbids is refused on its own, and every
// mode it allows is accepted.
func TestModes(t *testing.T) {
	for _, c := range []struct {
		kind  Kind
		mode  os.FileMode
		allow bool
	}{
		{Secret, 0o600, true}, {Secret, 0o640, true}, {Secret, 0o400, true}, {Secret, 0o440, true},
		{Secret, 0o620, false}, {Secret, 0o604, false}, {Secret, 0o602, false},
		{Secret, 0o601, false}, {Secret, 0o644, false}, {Secret, 0o660, false}, {Secret, 0o666, false},
		{Public, 0o644, true}, {Public, 0o600, true}, {Public, 0o755, true},
		{Public, 0o664, false}, {Public, 0o646, false}, {Public, 0o666, false},
	} {
		p := write(t, "x\n", c.mode)
		_, err := Read("test", p, c.kind)
		if c.allow {
			if err != nil {
				t.Errorf("kind %d mode %#o refused: %v", c.kind, c.mode, err)
			}
			continue
		}
		want := fmt.Sprintf("test file %s: mode %#o is too open", p, c.mode)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "chmod ") {
			t.Errorf("kind %d mode %#o: %v, want %q and a chmod hint", c.kind, c.mode, err, want)
		}
	}
}

// Refusals of what is not a small regular file, each naming the file.
func TestRefusedFiles(t *testing.T) {
	dir := t.TempDir()
	if _, err := Read("test", filepath.Join(dir, "missing"), Secret); !errors.Is(err, fs.ErrNotExist) ||
		!strings.Contains(err.Error(), "test file: open "+filepath.Join(dir, "missing")) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := Read("test", dir, Secret); err == nil || !strings.Contains(err.Error(), dir+": not a regular file") {
		t.Errorf("directory: %v", err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := Read("test", fifo, Secret); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("fifo: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("reading a FIFO blocked")
	}
	big := write(t, strings.Repeat("a", MaxSize+1), 0o600)
	if _, err := Read("test", big, Secret); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("larger than %d", MaxSize)) {
		t.Errorf("large file: %v", err)
	}
	if _, err := Read("test", write(t, strings.Repeat("a", MaxSize-1)+"\n", 0o600), Secret); err != nil {
		t.Errorf("a file of MaxSize bytes refused: %v", err)
	}
	// A symbolic link to an acceptable file is followed.
	link := filepath.Join(dir, "link")
	if err := os.Symlink(write(t, "x\n", 0o600), link); err != nil {
		t.Fatal(err)
	}
	if _, err := Read("test", link, Secret); err != nil {
		t.Errorf("symlink: %v", err)
	}
}

func TestParse(t *testing.T) {
	got, err := Parse([]byte("# header\n\n  one  \ntwo # trailing\nthree#not-a-comment\n\t# indented comment\nfour\t#tab\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{{3, "one"}, {4, "two"}, {5, "three#not-a-comment"}, {7, "four"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Parse = %v, want %v", got, want)
	}
	for name, data := range map[string]string{
		"empty":    "",
		"comments": "# a\n\n   # b\n",
	} {
		if _, err := Parse([]byte(data)); !errors.Is(err, ErrEmpty) {
			t.Errorf("%s: %v, want ErrEmpty", name, err)
		}
	}
	for name, data := range map[string]string{
		"control":     "ok\nab\x01c\n",
		"invalid utf": "ok\n\xff\xfe\n",
	} {
		if _, err := Parse([]byte(data)); err == nil || !strings.Contains(err.Error(), "line 2: holds control characters or invalid UTF-8") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestKeys(t *testing.T) {
	k1 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))
	k2 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 16))
	size32 := func(k []byte) error {
		if len(k) != 32 {
			return fmt.Errorf("%d bytes, want 32", len(k))
		}
		return nil
	}
	any := func([]byte) error { return nil }
	p := write(t, "# keys\n"+k1+"\n\n"+k2+" # old\n", 0o640)
	keys, err := Keys("site key", p, Secret, any)
	if err != nil || len(keys) != 2 || keys[0][0] != 1 || keys[1][0] != 2 {
		t.Fatalf("Keys = %v, %v", keys, err)
	}
	for _, c := range []struct {
		name, content string
		check         func([]byte) error
		want          string
	}{
		{"not base64", k1 + "\n%%%\n", any, ": line 2: not base64"},
		{"check", "# c\n" + k2 + "\n", size32, ": line 2: 16 bytes, want 32"},
		{"empty", "# c\n", any, ": no entry"},
	} {
		p := write(t, c.content, 0o600)
		if _, err := Keys("site key", p, Secret, c.check); err == nil || !strings.Contains(err.Error(), "site key file "+p+c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

func TestToken(t *testing.T) {
	tok := "abcdefghijklmnopqrstuvwxyz012345"
	if got, err := Token("token", write(t, "# the admin token\n"+tok+"\n", 0o640), 16); err != nil || string(got) != tok {
		t.Errorf("Token = %q, %v", got, err)
	}
	for _, c := range []struct {
		name, content string
		mode          os.FileMode
		want          string
	}{
		{"two lines", tok + "\n" + tok + "\n", 0o600, "line 2: a second line"},
		{"white space", "abcdefgh ijklmnopq\n", 0o600, "line 1: the token holds white space"},
		{"short", "abc\n", 0o600, "line 1: the token is 3 bytes, want at least 16"},
		{"open", tok, 0o644, "mode 0644 is too open"},
		{"empty", "\n", 0o600, "no entry"},
	} {
		p := write(t, c.content, c.mode)
		if _, err := Token("token", p, 16); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "token file "+p) {
			t.Errorf("%s: %v, want %q and the path", c.name, err, c.want)
		}
	}
}

func TestCreate(t *testing.T) {
	p := filepath.Join(t.TempDir(), "new.key")
	if err := Create(p, "secret\n"); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("stat: %v %v, want mode 0600", fi, err)
	}
	if f, err := Read("test", p, Secret); err != nil || f.Entries[0].Text != "secret" {
		t.Errorf("read back: %v %v", f, err)
	}
	err = Create(p, "other\n")
	if !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), "refusing to overwrite") {
		t.Errorf("second Create = %v, want a refusal wrapping fs.ErrExist", err)
	}
	if data, _ := os.ReadFile(p); string(data) != "secret\n" {
		t.Errorf("the file changed: %q", data)
	}
}

// Any bytes parse into entries with no comment, no surrounding space and a
// rising line number, or fail.
func FuzzParse(f *testing.F) {
	f.Add([]byte("# c\nkey # x\n\n a#b \n"))
	f.Add([]byte("\xff\n==\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		es, err := Parse(data)
		if err != nil {
			return
		}
		if len(es) == 0 {
			t.Fatal("no entries and no error")
		}
		last := 0
		for _, e := range es {
			if e.Line <= last || e.Text == "" || e.Text != strings.TrimSpace(e.Text) || strings.Contains(e.Text, " #") || strings.HasPrefix(e.Text, "#") {
				t.Fatalf("bad entry %+v after line %d", e, last)
			}
			last = e.Line
		}
	})
}
