package cmdutil

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOut(t *testing.T) {
	var stdout, stderr bytes.Buffer
	o := Out{Prog: "nodeagent", Stdout: &stdout, Stderr: &stderr}
	if code := o.Fail(errors.New("no agent")); code != ExitError || stderr.String() != "nodeagent: no agent\n" {
		t.Fatalf("Fail: %d %q", code, stderr.String())
	}
	stderr.Reset()
	if code := o.UsageError("epilog", "--job ID -- CMD", "--job is required"); code != ExitUsage ||
		stderr.String() != "nodeagent epilog: --job is required\nusage: nodeagent epilog --job ID -- CMD\n" {
		t.Fatalf("UsageError: %d %q", code, stderr.String())
	}
	if code := o.PrintJSON(map[string]int{"a": 1}); code != ExitOK || stdout.String() != "{\n  \"a\": 1\n}\n" {
		t.Fatalf("PrintJSON: %d %q", code, stdout.String())
	}
}

func TestCommandUsageAndIsSet(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.String("job", "", "the job `id`")
	if err := fs.Parse([]string{"--job", "7"}); err != nil {
		t.Fatal(err)
	}
	if !IsSet(fs, "job") || IsSet(fs, "other") {
		t.Fatal("IsSet")
	}
	var w bytes.Buffer
	CommandUsage(&w, "nodeagent", "job end", "--job ID", "record that a job ended", fs)
	if got := w.String(); !strings.HasPrefix(got, "usage: nodeagent job end --job ID\n\nRecord that a job ended.\n\nflags:\n") || !strings.Contains(got, "-job id") {
		t.Fatalf("CommandUsage:\n%s", got)
	}
	w.Reset()
	CommandUsage(&w, "aggregator", "help", "[COMMAND]", "", nil)
	if w.String() != "usage: aggregator help [COMMAND]\n\n.\n" {
		t.Fatalf("no flags: %q", w.String())
	}
}

func TestNewLogger(t *testing.T) {
	var w bytes.Buffer
	NewLogger(&w, "json", "warn").Info("hidden")
	NewLogger(&w, "json", "warn").Warn("shown", "k", 1)
	if got := w.String(); strings.Contains(got, "hidden") || !strings.Contains(got, `"msg":"shown","k":1`) {
		t.Fatalf("json at warn: %q", got)
	}
	w.Reset()
	NewLogger(&w, "text", "debug").Debug("d")
	if !strings.Contains(w.String(), "level=DEBUG msg=d") {
		t.Fatalf("text at debug: %q", w.String())
	}
}

func TestConfigPathAndPrintConfig(t *testing.T) {
	dir := t.TempDir()
	def := filepath.Join(dir, "default.toml")
	if got := ConfigPath("", def); got != "" {
		t.Errorf("ConfigPath with no default file = %q, want none", got)
	}
	if err := os.WriteFile(def, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := ConfigPath("", def); got != def {
		t.Errorf("ConfigPath = %q, want the default %q", got, def)
	}
	if got := ConfigPath("/etc/x.toml", def); got != "/etc/x.toml" {
		t.Errorf("ConfigPath with a flag = %q", got)
	}

	var stdout bytes.Buffer
	o := Out{Prog: "aggregator", Stdout: &stdout, Stderr: io.Discard}
	cfg := struct {
		Name string `toml:"name"`
	}{"agg-1"}
	if code := o.PrintConfig("", cfg); code != ExitOK || stdout.String() != "# (defaults) is valid; the effective configuration:\nname = 'agg-1'\n" {
		t.Fatalf("PrintConfig: %d %q", code, stdout.String())
	}
}
