package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
)

// TestPlanEvents: job start --R --eventlog takes the user's E from the
// record of the gracewatch jobtap plugin's jobspec-update (not R's E + G),
// R's E from any other eventlog (a record the user submitted is not the
// plugin's), and says a grace mismatch on standard error.
func TestPlanEvents(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// The submit event of a job whose user wrote a record of their own:
	// only a jobspec-update event of the job manager carries the plugin's.
	const submitted = `{"timestamp": 1, "name": "submit", "context": {"userid": 1000, "urgency": 16, "flags": 0, "version": 1}}` + "\n"
	r := write("R", `{"version": 1, "execution": {"R_lite": [{"rank": "0", "children": {"core": "0"}}], "starttime": 1000, "expiration": 1015}}`)
	for _, tt := range []struct {
		name, eventlog, want, warn string
	}{
		{"augmented by the plugin: the user's E", submitted + `{"timestamp": 2, "name": "jobspec-update", "context": {"attributes.system.duration": 15, "attributes.system.gracewatch": {"duration": 5, "grace": 10}}}`, "1005", ""},
		{"without the plugin: R's E", submitted, "1015", ""},
		{"a bad record: R's E and a warning", submitted + `{"timestamp": 2, "name": "jobspec-update", "context": {"attributes.system.duration": 15, "attributes.system.gracewatch": {"duration": -5, "grace": 20}}}`, "1015", "E taken from R as it is"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			c := &cli{stdout: &bytes.Buffer{}, stderr: &stderr, getenv: func(string) string { return "" }, now: time.Now}
			f := c.newFlags("job start")
			jf := newJobFlags(f, false)
			jf.plan = newPlanEvents(f)
			e, code, ok := jf.parse(c, f, []string{"--job", "7", "--R", r, "--eventlog", write("eventlog", tt.eventlog)})
			if !ok || e != tt.want {
				t.Fatalf("E %q (exit %d, %v), want %q; stderr %q", e, code, ok, tt.want, stderr.String())
			}
			if tt.warn == "" && stderr.Len() > 0 || !strings.Contains(stderr.String(), tt.warn) {
				t.Fatalf("stderr %q, want %q", stderr.String(), tt.warn)
			}
		})
	}

	t.Run("a grace mismatch is said, the same G is not", func(t *testing.T) {
		var stderr bytes.Buffer
		c := &cli{stderr: &stderr}
		p := &planEvents{}
		p.found.Duration, p.found.Grace, p.ok = 5, 10, true
		p.check(c, api.Job{ID: "7", Grace: "10s"})
		if stderr.Len() != 0 {
			t.Fatalf("same G: %q", stderr.String())
		}
		p.check(c, api.Job{ID: "7", Grace: "3s"})
		if want := "job 7: grace mismatch: the scheduler plans with grace 10s"; !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), "agent has grace 3s") {
			t.Fatalf("mismatch: %q, want %q ... agent has grace 3s", stderr.String(), want)
		}
	})

	t.Run("--eventlog without --R is a usage error", func(t *testing.T) {
		var stderr bytes.Buffer
		c := &cli{stdout: &bytes.Buffer{}, stderr: &stderr, getenv: func(string) string { return "" }, now: time.Now}
		f := c.newFlags("job start")
		jf := newJobFlags(f, false)
		jf.plan = newPlanEvents(f)
		if _, code, ok := jf.parse(c, f, []string{"--job", "7", "--expiration", "0", "--eventlog", r}); ok || code == 0 {
			t.Fatalf("accepted (exit %d)", code)
		}
	})
}
