package report

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds of a Cause's fields, in bytes. They are the mesh schema's
// (proto/gracewatch.proto, Cause): the agent keeps its causes within them and
// every aggregator drops a cause that breaks one.
const (
	MaxCauseFSType     = 32
	MaxCauseSource     = 256
	MaxCauseMountpoint = 256
	MaxCauseWchan      = 64
	MaxCauseClass      = 16
	MaxCauseComm       = 64
	MaxCauseJob        = 128
)

// Cause is what a violating teardown's processes wait on, in bounded,
// printable fields (never parsed out of a free-text reason): the file system
// that the processes of the worst class hold open, else the wait channel of
// the worst process. Aggregators group the DOWN nodes that share one into an
// incident (docs/DESIGN.md §5b).
type Cause struct {
	// FSType, Source and Mountpoint name the file system (mountinfo's
	// fstype, mount source and mount point); empty when none was named.
	FSType     string `json:"fstype,omitempty"`
	Source     string `json:"source,omitempty"`
	Mountpoint string `json:"mountpoint,omitempty"`
	// Wchan is the worst process's kernel wait channel.
	Wchan string `json:"wchan,omitempty"`
	// Class is the worst class.
	Class Class `json:"class,omitempty"`
	// Counts is the number of processes by class.
	Counts map[Class]int `json:"counts,omitempty"`
	// ExamplePID and ExampleComm are the worst process; Job its job.
	ExamplePID  int    `json:"example_pid,omitempty"`
	ExampleComm string `json:"example_comm,omitempty"`
	Job         string `json:"job,omitempty"`
}

// Empty reports whether c names neither a file system nor a wait channel.
func (c Cause) Empty() bool { return c.FSType == "" && c.Wchan == "" }

// Check returns an error naming the first field of c that breaks its
// bound, is not printable UTF-8, or (class) is not a known class.
func (c Cause) Check() error {
	for _, f := range []struct {
		name, v string
		max     int
	}{
		{"fstype", c.FSType, MaxCauseFSType},
		{"source", c.Source, MaxCauseSource},
		{"mountpoint", c.Mountpoint, MaxCauseMountpoint},
		{"wchan", c.Wchan, MaxCauseWchan},
		{"class", string(c.Class), MaxCauseClass},
		{"example_comm", c.ExampleComm, MaxCauseComm},
		{"job", c.Job, MaxCauseJob},
	} {
		if err := checkField(f.v, f.max); err != nil {
			return fmt.Errorf("cause %s: %w", f.name, err)
		}
	}
	if c.Class != "" && c.Class.Severity() == 0 {
		return fmt.Errorf("cause class: unknown class %q", string(c.Class))
	}
	if c.FSType == "" && (c.Source != "" || c.Mountpoint != "") {
		return fmt.Errorf("cause: a source or mountpoint without an fstype")
	}
	if c.ExamplePID < 0 {
		return fmt.Errorf("cause example_pid: negative (%d)", c.ExamplePID)
	}
	return nil
}

func checkField(v string, max int) error {
	switch {
	case len(v) > max:
		return fmt.Errorf("%d bytes, more than %d", len(v), max)
	case !utf8.ValidString(v):
		return fmt.Errorf("not valid UTF-8")
	}
	for _, r := range v {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("holds the unprintable character %U", r)
		}
	}
	return nil
}

// CleanField makes v fit a Cause field of at most max bytes: unprintable
// characters (and invalid UTF-8) become '?', and a longer value is cut on a
// rune boundary.
func CleanField(v string, max int) string {
	v = strings.ToValidUTF8(v, "?")
	v = strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return '?'
		}
		return r
	}, v)
	if len(v) <= max {
		return v
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return v[:cut]
}
