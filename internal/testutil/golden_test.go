package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

func TestGoldenDiff(t *testing.T) {
	tests := []struct {
		name, want, got, diff string
	}{
		{"equal", "a\nb\n", "a\nb\n", ""},
		{"a line added", "a\nc\n", "a\nb\nc\n", "first difference at line 2:\n want c\n got  b\n+ b\n"},
		{"a line changed", "a\nb\n", "a\nB\n", "first difference at line 2:\n want b\n got  B\n- b\n+ B\n"},
		{"the end missing", "a\nb\n", "a\n", "first difference at line 2:\n want b\n got  \n- b\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := GoldenDiff(tt.want, tt.got); d != tt.diff {
				t.Errorf("GoldenDiff = %q, want %q", d, tt.diff)
			}
		})
	}
}

func TestGoldenUpdateThenCompare(t *testing.T) {
	path := filepath.Join(t.TempDir(), "testdata", "out.golden")
	Golden(t, path, []byte("one\ntwo\n"), true)
	if b, err := os.ReadFile(path); err != nil || string(b) != "one\ntwo\n" {
		t.Fatalf("update wrote %q, %v", b, err)
	}
	Golden(t, path, []byte("one\ntwo\n"), false)
}
