package reservation

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/runcmd"
)

func testCommand(argv ...string) *Command {
	return &Command{Argv: argv, Prefix: DefaultPrefix, Timeout: 5 * time.Second, Hostlists: commaLists}
}

func TestParseList(t *testing.T) {
	for _, tc := range []struct {
		name, out, want, err string
	}{
		{name: "empty"},
		{name: "one", out: "gracewatch_a n1,n2 1796402898\n", want: "gracewatch_a n1,n2 1796402898"},
		{name: "blank lines and spaces", out: "\n  gracewatch_a   n2,n1   100  \n\n", want: "gracewatch_a n1,n2 100"},
		{name: "another prefix is skipped", out: "maint_n2 n2 100\ngracewatch_a n1 100\n", want: "gracewatch_a n1 100"},
		{name: "no nodes", out: "gracewatch_a (null) 100\n", want: "gracewatch_a  100"},
		{name: "duplicate nodes", out: "gracewatch_a n1,n1 100\n", want: "gracewatch_a n1 100"},
		{name: "two fields", out: "gracewatch_a n1\n", err: `line 1: want "NAME HOSTLIST END"`},
		{name: "four fields", out: "gracewatch_a n1 100 x\n", err: `line 1: want "NAME HOSTLIST END"`},
		{name: "bad end", out: "gracewatch_a n1 2026-12-04T16:00:00\n", err: "line 1: end"},
		{name: "negative end", out: "gracewatch_a n1 -5\n", err: "line 1: end"},
		{name: "listed twice", out: "gracewatch_a n1 100\ngracewatch_a n2 100\n", err: "line 2: reservation gracewatch_a listed twice"},
		{name: "prefix only", out: "gracewatch_ n1 100\n", err: "line 1: refusing reservation"},
		{name: "bad name", out: "gracewatch_a;b n1 100\n", err: "line 1: refusing reservation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list, err := testCommand("x").parseList([]byte(tc.out))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range list {
				got = append(got, r.Name+" "+strings.Join(r.Nodes, ",")+" "+strconv.FormatInt(r.End.Unix(), 10))
			}
			if strings.Join(got, "|") != tc.want {
				t.Errorf("got %q, want %q", strings.Join(got, "|"), tc.want)
			}
		})
	}
}

// recorder writes a script that appends its arguments and
// $GRACEWATCH_RESERVATION_PREFIX to a log, prints stdout and exits with
// code.
func recorder(t *testing.T, stdout string, code int) (script, log string) {
	t.Helper()
	dir := t.TempDir()
	log = filepath.Join(dir, "log")
	script = filepath.Join(dir, "cmd.sh")
	text := "#!/bin/sh\necho \"$GRACEWATCH_RESERVATION_PREFIX $*\" >> " + log + "\nprintf '%s' '" + stdout + "'\necho 'scontrol said no' >&2\nexit " + strconv.Itoa(code) + "\n"
	if err := os.WriteFile(script, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
	return script, log
}

func readLog(t *testing.T, log string) string {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

func TestCommandVerbs(t *testing.T) {
	script, log := recorder(t, "gracewatch_a n1,n2 1796402898\n", 0)
	c := testCommand(script, "--site", "x")
	ctx := t.Context()
	list, err := c.List(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "gracewatch_a" {
		t.Fatalf("list = %+v, %v", list, err)
	}
	r := Reservation{Name: "gracewatch_b", Nodes: []string{"n1", "n2"}, End: time.Unix(1796402900, 0)}
	if err := c.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, "gracewatch_b"); err != nil {
		t.Fatal(err)
	}
	want := "gracewatch_ --site x list\n" +
		"gracewatch_ --site x create gracewatch_b n1,n2 1796402900\n" +
		"gracewatch_ --site x update gracewatch_b n1,n2 1796402900\n" +
		"gracewatch_ --site x delete gracewatch_b\n"
	if got := readLog(t, log); got != want {
		t.Errorf("the command ran as\n%s\nwant\n%s", got, want)
	}
}

// TestCommandRefuses: what is not gracewatch's, or cannot be passed, never
// reaches the command.
func TestCommandRefuses(t *testing.T) {
	script, log := recorder(t, "", 0)
	c := testCommand(script)
	ctx := t.Context()
	end := time.Unix(1796402900, 0)
	many := make([]string, 0, 20000)
	for i := range 20000 {
		many = append(many, "node-with-a-long-name-"+strconv.Itoa(i))
	}
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"delete maint", c.Delete(ctx, "maint_n2")},
		{"update maint", c.Update(ctx, Reservation{Name: "maint_n2", Nodes: []string{"n2"}, End: end})},
		{"create without the prefix", c.Create(ctx, Reservation{Name: "x", Nodes: []string{"n2"}, End: end})},
		{"create with a bad name", c.Create(ctx, Reservation{Name: "gracewatch_a b", Nodes: []string{"n2"}, End: end})},
		{"create without nodes", c.Create(ctx, Reservation{Name: "gracewatch_a", End: end})},
		{"a hostlist too long", c.Create(ctx, Reservation{Name: "gracewatch_a", Nodes: many, End: end})},
	} {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	if got := readLog(t, log); got != "" {
		t.Errorf("the command ran: %q", got)
	}
	if err := c.Create(ctx, Reservation{Name: "gracewatch_a", Nodes: many, End: end}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a hostlist too long: %v, want ErrTooLarge", err)
	}
}

func TestCommandFailures(t *testing.T) {
	script, _ := recorder(t, "", 1)
	err := testCommand(script).Delete(t.Context(), "gracewatch_a")
	var ce *CommandError
	if !errors.As(err, &ce) || ce.Exit != 1 || !strings.Contains(err.Error(), "scontrol said no") || !strings.Contains(err.Error(), "delete gracewatch_a") {
		t.Errorf("err = %v, want a CommandError with the argv, exit 1 and the output", err)
	}
	hang := filepath.Join(t.TempDir(), "hang.sh")
	if err := os.WriteFile(hang, []byte("#!/bin/sh\nsleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := testCommand(hang)
	c.Timeout = 300 * time.Millisecond
	start := time.Now()
	if _, err := c.List(t.Context()); !errors.Is(err, runcmd.ErrTimedOut) {
		t.Errorf("a hung command: %v, want a timeout", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("a hung command took %v", d)
	}
	if _, err := testCommand("/nonexistent/slurm-reservation.sh").List(t.Context()); err == nil {
		t.Error("a missing command: no error")
	}
	garbage, _ := recorder(t, "this is not a list\n", 0)
	if _, err := testCommand(garbage).List(t.Context()); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("garbage: %v", err)
	}
}

func FuzzParseList(f *testing.F) {
	f.Add([]byte("gracewatch_a n1,n2 1796402898\nmaint_n2 n2 5\n"))
	f.Add([]byte("gracewatch_a (null) 0\n"))
	f.Add([]byte("gracewatch_\x00 n 1\n"))
	c := testCommand("x")
	f.Fuzz(func(t *testing.T, out []byte) {
		list, err := c.parseList(out)
		if err != nil {
			return
		}
		for _, r := range list {
			if c.owned(r.Name) != nil {
				t.Fatalf("listed %q, not gracewatch's", r.Name)
			}
			for i := 1; i < len(r.Nodes); i++ {
				if r.Nodes[i-1] >= r.Nodes[i] {
					t.Fatalf("nodes not sorted and unique: %q", r.Nodes)
				}
			}
		}
	})
}
