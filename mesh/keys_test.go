package mesh

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Key files: errors name the file and the line; modes too open are
// refused.
func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	site := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("s", 32)))
	old := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("o", 40)))
	p := write("site.key", "# the site key\n"+site+"\n\n"+old+" # the old one\n", 0o640)
	keys, err := LoadSiteKeys(p)
	if err != nil || len(keys) != 2 || string(keys[0]) != strings.Repeat("s", 32) {
		t.Fatalf("LoadSiteKeys: %q %v", keys, err)
	}
	for _, c := range []struct {
		name, text string
		mode       os.FileMode
		load       func(string) error
		want       string
	}{
		{"short.key", base64.StdEncoding.EncodeToString([]byte("short")) + "\n", 0o600, loadSite, "line 1: 5 bytes, want at least 32"},
		{"junk.key", site + "\n%%%\n", 0o600, loadSite, "line 2: not base64"},
		{"open.key", site + "\n", 0o644, loadSite, "mode 0644 is too open (want 0600 or 0640"},
		{"empty.key", "# nothing\n", 0o600, loadSite, "no entry"},
		{"two-node.key", base64.StdEncoding.EncodeToString(make([]byte, 32)) + "\n" + base64.StdEncoding.EncodeToString(make([]byte, 32)) + "\n", 0o600, loadNode, "2 keys, want one"},
		{"node-size.key", site + "x\n", 0o600, loadNode, "line 1: not base64"},
		{"pub-writable.pub", base64.StdEncoding.EncodeToString(make([]byte, 32)) + "\n", 0o666, loadPubs, "is too open (want 0644"},
		{"pub-size.pub", old + "\n", 0o644, loadPubs, "line 1: 40 bytes, want 32 (an Ed25519 public key"},
	} {
		path := write(c.name, c.text, c.mode)
		err := c.load(path)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want an error naming the file and saying %q", c.name, err, c.want)
		}
	}
}

func loadSite(p string) error { _, err := LoadSiteKeys(p); return err }
func loadNode(p string) error { _, err := LoadNodeKey(p); return err }
func loadPubs(p string) error { _, err := LoadAggregatorKeys(p); return err }
