package reach

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/testutil"
)

// A book keeps what it is told, saves it within SaveEvery of the last
// save, and reads it back: the nodes of the file are handed out once.
func TestBookSavesAndReads(t *testing.T) {
	dir := t.TempDir()
	clk := clock.NewFake(time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC))
	b, err := Open(dir, clk, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, FileName)
	read := func() string { data, _ := os.ReadFile(path); return string(data) }
	b.Set("node2", "10.0.0.2:7946")
	b.Set("node1", "10.0.0.1:7946")
	want := "node1 10.0.0.1:7946\nnode2 10.0.0.2:7946\n"
	testutil.Eventually(t, 30*time.Second, "the first save", func() bool {
		clk.Advance(time.Millisecond)
		return read() == want
	})
	b.Forget("node2")
	clk.Advance(SaveEvery / 2)
	if got := read(); got != want {
		t.Fatalf("saved again within %v: %q", SaveEvery, got)
	}
	want = "node1 10.0.0.1:7946\n"
	testutil.Eventually(t, 30*time.Second, "the save after SaveEvery", func() bool {
		clk.Advance(SaveEvery)
		return read() == want
	})

	again, err := Open(dir, clk, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if got := again.TakeLoaded(); len(got) != 1 || got["node1"] != "10.0.0.1:7946" {
		t.Errorf("loaded %v, want node1 alone", got)
	}
	if got := again.TakeLoaded(); len(got) != 0 {
		t.Errorf("loaded twice: %v", got)
	}
}

// A line that is not a node name and an address is skipped and counted
// in the error; the rest is read. A missing file, or no dir, is an empty
// book.
func TestOpenSkipsBadLines(t *testing.T) {
	dir := t.TempDir()
	data := "node1 10.0.0.1:7946\nnot a node\nALL 10.0.0.9:1\nnode3 nowhere\nnode2 10.0.0.2:7946\n"
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := Open(dir, clock.Real{}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "3 lines skipped (line 2:") {
		t.Errorf("error %v, want 3 lines skipped from line 2", err)
	}
	if got := b.TakeLoaded(); len(got) != 2 || got["node2"] != "10.0.0.2:7946" {
		t.Errorf("loaded %v, want node1 and node2", got)
	}
	for _, dir := range []string{t.TempDir(), ""} {
		b, err := Open(dir, clock.Real{}, slog.New(slog.DiscardHandler))
		if err != nil || len(b.TakeLoaded()) != 0 {
			t.Errorf("Open(%q) = %v, %v: want an empty book", dir, b.TakeLoaded(), err)
		}
	}
	if _, err := Open(filepath.Join(dir, FileName), clock.Real{}, slog.New(slog.DiscardHandler)); err == nil || errors.Is(err, os.ErrNotExist) {
		t.Errorf("a dir that is a file: %v, want an error that is not ErrNotExist", err)
	}
}
