package reservation

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gracewatch/gracewatch/internal/runcmd"
)

// Scheduler is the scheduler's side of the reservations: Command runs the
// site's command; FakeScheduler is the test double. Every method may block
// for a command's timeout; none is called concurrently by the Planner.
type Scheduler interface {
	// List returns the reservations whose names begin with the prefix,
	// each with its nodes sorted.
	List(ctx context.Context) ([]Reservation, error)
	// Create makes r in the scheduler.
	Create(ctx context.Context, r Reservation) error
	// Update sets the nodes and the end of the existing r.Name.
	Update(ctx context.Context, r Reservation) error
	// Delete removes the reservation name.
	Delete(ctx context.Context, name string) error
}

// Hostlists writes and reads the scheduler's compressed node lists
// ("n[1-4,7]"); the aggregator's hostlist library.
type Hostlists struct {
	Compress func(names []string) (string, error)
	Expand   func(hostlist string) ([]string, error)
}

// Command is the Scheduler that runs the site's command (Config.Command)
// with a verb appended: "list" prints one line per reservation, "NAME
// HOSTLIST END" (END in Unix seconds); "create NAME HOSTLIST END",
// "update NAME HOSTLIST END" and "delete NAME" exit 0 when done. The
// environment adds GRACEWATCH_RESERVATION_PREFIX. A name without the
// prefix is never passed to it, and one it lists is ignored.
type Command struct {
	Argv      []string
	Prefix    string
	Timeout   time.Duration
	Hostlists Hostlists
}

var _ Scheduler = (*Command)(nil)

// nameRE is what a reservation name may hold after its prefix.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// owned checks that name is one of gracewatch's (the prefix and a tail
// that a command line carries safely).
func (c *Command) owned(name string) error {
	tail, ok := strings.CutPrefix(name, c.Prefix)
	if !ok || !nameRE.MatchString(tail) {
		return fmt.Errorf("refusing reservation %q: not one of gracewatch's (prefix %q)", name, c.Prefix)
	}
	return nil
}

func (c *Command) run(ctx context.Context, stdoutLimit int, args ...string) ([]byte, error) {
	argv := append(slices.Clone(c.Argv), args...)
	res, err := runcmd.Run(ctx, argv, runcmd.Options{Timeout: c.Timeout, StdoutLimit: stdoutLimit,
		Env: []string{"GRACEWATCH_RESERVATION_PREFIX=" + c.Prefix}})
	if err != nil {
		out := res.Output
		if out == "" && stdoutLimit == 0 {
			out = "(no output)"
		}
		return nil, &CommandError{Argv: argv, Exit: res.Exit, Output: out, Err: err}
	}
	return res.Stdout, nil
}

// CommandError is a run of the command that failed.
type CommandError struct {
	Argv   []string
	Exit   int
	Output string
	Err    error
}

func (e *CommandError) Error() string {
	msg := fmt.Sprintf("%s: %v", strings.Join(e.Argv, " "), e.Err)
	if e.Output != "" {
		msg += ": " + e.Output
	}
	return msg
}

func (e *CommandError) Unwrap() error { return e.Err }

// List runs "list" and parses its lines; a line it cannot read fails the
// whole list (the planner then changes nothing), a name without the
// prefix is skipped.
func (c *Command) List(ctx context.Context) ([]Reservation, error) {
	out, err := c.run(ctx, maxListOutput, string(verbList))
	if err != nil {
		return nil, err
	}
	return c.parseList(out)
}

// parseList reads the output of "list".
func (c *Command) parseList(out []byte) ([]Reservation, error) {
	var list []Reservation
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, MaxHostlist+256)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		f := strings.Fields(text)
		if len(f) != 3 {
			return nil, fmt.Errorf("list, line %d: want \"NAME HOSTLIST END\", got %q", line, clip(text))
		}
		if !strings.HasPrefix(f[0], c.Prefix) {
			continue
		}
		if err := c.owned(f[0]); err != nil {
			return nil, fmt.Errorf("list, line %d: %w", line, err)
		}
		if seen[f[0]] {
			return nil, fmt.Errorf("list, line %d: reservation %s listed twice", line, f[0])
		}
		seen[f[0]] = true
		end, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || end < 0 || end > 1<<40 {
			return nil, fmt.Errorf("list, line %d: end %q is not a time in Unix seconds", line, clip(f[2]))
		}
		var nodes []string
		if f[1] != "(null)" {
			nodes, err = c.Hostlists.Expand(f[1])
			if err != nil {
				return nil, fmt.Errorf("list, line %d: nodes: %w", line, err)
			}
		}
		slices.Sort(nodes)
		list = append(list, Reservation{Name: f[0], Nodes: slices.Compact(nodes), End: time.Unix(end, 0)})
		if len(list) > MaxListed {
			return nil, fmt.Errorf("list: more than %d reservations named %s*", MaxListed, c.Prefix)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	return list, nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// args checks r and returns "NAME HOSTLIST END".
func (c *Command) args(r Reservation) ([]string, error) {
	if err := c.owned(r.Name); err != nil {
		return nil, err
	}
	if len(r.Nodes) == 0 {
		return nil, fmt.Errorf("reservation %s: no nodes", r.Name)
	}
	hl, err := c.Hostlists.Compress(r.Nodes)
	if err != nil {
		return nil, fmt.Errorf("reservation %s: %w", r.Name, err)
	}
	if len(hl) > MaxHostlist {
		return nil, fmt.Errorf("reservation %s: %w: a hostlist of %d bytes (at most %d)", r.Name, ErrTooLarge, len(hl), MaxHostlist)
	}
	return []string{r.Name, hl, strconv.FormatInt(r.End.Unix(), 10)}, nil
}

// ErrTooLarge is the error of a reservation whose hostlist is too long for
// a command line: the planner splits it.
var ErrTooLarge = errors.New("too many nodes for one command")

// Create runs "create NAME HOSTLIST END".
func (c *Command) Create(ctx context.Context, r Reservation) error {
	return c.put(ctx, verbCreate, r)
}

// Update runs "update NAME HOSTLIST END".
func (c *Command) Update(ctx context.Context, r Reservation) error {
	return c.put(ctx, verbUpdate, r)
}

// put runs "VERB NAME HOSTLIST END" (create or update).
func (c *Command) put(ctx context.Context, v verb, r Reservation) error {
	a, err := c.args(r)
	if err != nil {
		return err
	}
	_, err = c.run(ctx, 0, append([]string{string(v)}, a...)...)
	return err
}

// Delete runs "delete NAME".
func (c *Command) Delete(ctx context.Context, name string) error {
	if err := c.owned(name); err != nil {
		return err
	}
	_, err := c.run(ctx, 0, string(verbDelete), name)
	return err
}
