package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type sample struct {
	Name     string `toml:"name"`
	Teardown struct {
		Grace Duration `toml:"grace"`
	} `toml:"teardown"`
	UIDs []int `toml:"uids"`
}

func TestDecode(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		want    time.Duration
		wantErr []string
	}{
		{name: "string duration", in: "name = \"a\"\n[teardown]\ngrace = \"2m\"\n", want: 2 * time.Minute},
		{name: "string seconds", in: "[teardown]\ngrace = \"90\"\n", want: 90 * time.Second},
		{name: "integer seconds", in: "[teardown]\ngrace = 90\n", want: 90 * time.Second},
		{name: "float refused", in: "[teardown]\ngrace = 1.5\n", wantErr: []string{"invalid duration"}},
		{name: "defaults kept", in: "name = \"x\"\n", want: time.Second},
		{name: "unknown key", in: "name = \"a\"\n\n[teardown]\ngrase = \"2m\"\n", wantErr: []string{"f.toml:4:", `key "teardown.grase"`, "unknown key"}},
		{name: "two unknown keys", in: "nam = 1\n[tear]\nx = 2\n", wantErr: []string{"f.toml:1:", `"nam"`, "f.toml:2:", `"tear"`}},
		{name: "bad duration", in: "[teardown]\ngrace = \"soon\"\n", wantErr: []string{"f.toml:2", "invalid duration"}},
		{name: "wrong type", in: "name = 3\n", wantErr: []string{"f.toml:1", "name"}},
		{name: "syntax", in: "name = \n", wantErr: []string{"f.toml:1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s sample
			s.Teardown.Grace = Dur(time.Second)
			err := Decode("f.toml", []byte(tc.in), &s)
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("no error, want %q", tc.wantErr)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Teardown.Grace.D() != tc.want {
				t.Fatalf("grace = %v, want %v", s.Teardown.Grace.D(), tc.want)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte("name = \"a\"\n[teardown]\ngrace = \"2m\"\nuids = [0, 1]\n"))
	f.Add([]byte("[teardown]\ngrace = 90\n"))
	f.Add([]byte("x = 1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var s sample
		err := Decode("fuzz.toml", data, &s)
		if err != nil && !strings.HasPrefix(err.Error(), "fuzz.toml") {
			t.Fatalf("error does not name the file: %v", err)
		}
	})
}

// LoadKeys reads the keys its struct has and ignores the others; what is not
// TOML, or a known key of the wrong type, is still an error at its line.
func TestLoadKeys(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	type sock struct {
		Socket string `toml:"socket"`
	}
	var v sock
	if err := LoadKeys(write("ok.toml", "node_name = \"n1\"\nsocket = \"/run/x.sock\"\n[teardown]\ngrase = 3\n"), &v); err != nil || v.Socket != "/run/x.sock" {
		t.Fatalf("LoadKeys = %v, socket %q", err, v.Socket)
	}
	if err := Load(filepath.Join(dir, "ok.toml"), &v); err == nil {
		t.Fatal("Load accepted the keys LoadKeys ignores")
	}
	for name, text := range map[string]string{
		"syntax.toml": "socket = \"/x\"\n[teardown\n",
		"type.toml":   "\nsocket = 7\n",
	} {
		p := write(name, text)
		err := LoadKeys(p, &sock{})
		var ce *Error
		if !errors.As(err, &ce) || ce.File != p || ce.Line != 2 {
			t.Errorf("%s: %v; want an error at %s:2", name, err, p)
		}
	}
	if err := LoadKeys(filepath.Join(dir, "missing.toml"), &sock{}); err == nil {
		t.Error("LoadKeys of a missing file: no error")
	}
}

func TestSize(t *testing.T) {
	type doc struct {
		Tail Size `toml:"tail"`
	}
	cases := []struct {
		in      string
		want    int64
		wantErr string
	}{
		{in: `tail = "64KiB"`, want: 64 << 10},
		{in: `tail = "1MiB"`, want: 1 << 20},
		{in: `tail = "2 GiB"`, want: 2 << 30},
		{in: `tail = "64KB"`, want: 64 << 10},
		{in: `tail = "512"`, want: 512},
		{in: `tail = 4096`, want: 4096},
		{in: `tail = 1_024`, want: 1024},
		{in: `tail = "big"`, wantErr: `f.toml:1: key "tail": invalid size "big"`},
		{in: `tail = -1`, wantErr: `f.toml:1: key "tail": size "-1" is negative`},
		{in: `tail = "99999999999TiB"`, wantErr: "out of range"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			var d doc
			err := Decode("f.toml", []byte(tc.in+"\n"), &d)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || d.Tail.N() != tc.want {
				t.Fatalf("got %d, %v; want %d", d.Tail.N(), err, tc.want)
			}
			text, _ := d.Tail.MarshalText()
			var back Size
			if err := back.UnmarshalText(text); err != nil || back != d.Tail {
				t.Fatalf("%q does not read back: %v, %d", text, err, back.N())
			}
		})
	}
}

func FuzzSize(f *testing.F) {
	for _, s := range []string{"64KiB", "1", "0", "-1", "9223372036854775807", "1TiB", " 2 MB ", "KiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var v Size
		if err := v.UnmarshalText([]byte(s)); err != nil {
			return
		}
		if v.N() < 0 {
			t.Fatalf("%q: negative size %d", s, v.N())
		}
		text, err := v.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Size
		if err := back.UnmarshalText(text); err != nil || back != v {
			t.Fatalf("%q → %q does not read back: %v", s, text, err)
		}
	})
}
