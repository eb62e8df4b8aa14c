// Package nodename is the one rule for a node's (or an aggregator's) name,
// applied wherever a name enters gracewatch: the agent's configuration, the
// mesh, the HTTP API and the actuators' placeholders.
//
// A name is a host name as the schedulers write one: letters, digits, '-',
// '_' and '.', starting with a letter or a digit, at most MaxLen bytes. That
// excludes what a scheduler would read as more than one node (brackets of a
// host list, commas, spaces), what a command would read as an option (a
// leading '-'), anything a shell or a log line would need quoting for, and
// the word a scheduler reads as every node ("ALL", in any case: Slurm's
// scontrol update NodeName=ALL).
package nodename

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxLen is the longest name accepted: a DNS label is at most 63 bytes and
// a fully qualified name 253; Slurm's NodeName and Flux's hostnames are
// within it.
const MaxLen = 253

// ErrInvalid is wrapped by every error of Validate.
var ErrInvalid = errors.New("invalid node name")

// Validate reports why name is not a node name, or nil. The error quotes the
// name (escaped, at most 64 bytes of it) and names the first offending
// character and its position.
func Validate(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty", ErrInvalid)
	}
	if len(name) > MaxLen {
		return fmt.Errorf("%w %s: %d bytes, at most %d", ErrInvalid, Quote(name), len(name), MaxLen)
	}
	if strings.EqualFold(name, "all") {
		return fmt.Errorf("%w %s: reserved: a scheduler reads it as every node", ErrInvalid, Quote(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if isAlnum(c) {
			continue
		}
		if i == 0 {
			return fmt.Errorf("%w %s: must start with a letter or a digit, not %s", ErrInvalid, Quote(name), strconv.QuoteRune(rune(c)))
		}
		if c == '-' || c == '_' || c == '.' {
			continue
		}
		what := strconv.QuoteRune(rune(c))
		if c >= 0x80 {
			what = fmt.Sprintf("byte 0x%02x", c)
		}
		return fmt.Errorf("%w %s: %s at byte %d (letters, digits, '-', '_' and '.' only; no host lists, commas or spaces)",
			ErrInvalid, Quote(name), what, i)
	}
	return nil
}

// Valid reports whether Validate accepts name.
func Valid(name string) bool { return Validate(name) == nil }

// Quote returns name quoted for a log line or an error: escaped, and cut to
// 64 bytes with a marker, so that a hostile name cannot flood a log.
func Quote(name string) string {
	const show = 64
	if len(name) > show {
		return strconv.Quote(name[:show]) + fmt.Sprintf("…(%d bytes)", len(name))
	}
	return strconv.Quote(name)
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// ForLog returns name as it is if it is valid, else Quote(name): a log
// value that is short and unambiguous either way.
func ForLog(name string) string {
	if Valid(name) {
		return name
	}
	return Quote(name)
}
