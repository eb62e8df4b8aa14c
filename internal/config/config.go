// Package config decodes gracewatch's TOML files strictly: an unknown key, a
// value of the wrong type or a syntax error is an error that names the file,
// the line and the key, so a typo never silently falls back to a default.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
)

// Error is a problem at one place of a configuration file.
type Error struct {
	File string
	Line int    // 1-based; 0 when unknown
	Key  string // dotted key; empty when the problem is not about one key
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Key != "" {
		fmt.Fprintf(&b, "key %q: ", e.Key)
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Load reads the file at path into v (a pointer to a struct holding the
// defaults). See Decode.
func Load(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	return Decode(path, data, v)
}

// LoadKeys reads the file at path into v like Load, but keys that v does
// not have are ignored: for a program that reads a key or two of a file
// that another program validates (the client's socket in the agent's
// file). A file that is not TOML, or a known key of the wrong type, is
// still an error naming the file and line.
func LoadKeys(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	return decode(path, data, v, false)
}

// Decode decodes data, which came from the file named name, into v. Keys of v
// absent from data keep their values. Unknown keys are errors; all of them are
// reported, one per line of the returned error.
func Decode(name string, data []byte, v any) error {
	return decode(name, data, v, true)
}

func decode(name string, data []byte, v any, strictKeys bool) error {
	dec := toml.NewDecoder(bytes.NewReader(data))
	if strictKeys {
		dec.DisallowUnknownFields()
	}
	// Needed for Duration.UnmarshalTOML: without it an integer decodes into
	// the duration as nanoseconds.
	dec.EnableUnmarshalerInterface()
	err := dec.Decode(v)
	if err == nil {
		return nil
	}
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) {
		errs := make([]error, 0, len(strict.Errors))
		for i := range strict.Errors {
			de := &strict.Errors[i]
			line, _ := de.Position()
			errs = append(errs, &Error{File: name, Line: line, Key: strings.Join(de.Key(), "."), Msg: "unknown key"})
		}
		return errors.Join(errs...)
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		line, _ := de.Position()
		key := strings.Join(de.Key(), ".")
		// The decoder names a duplicate key by its last part ("grace"):
		// the line says under which table it stands.
		if full := keyAtLine(data, line); full != "" && (full == key || strings.HasSuffix(full, "."+key)) {
			key = full
		}
		return &Error{File: name, Line: line, Key: key, Msg: de.Error()}
	}
	var ve *valueError
	if errors.As(err, &ve) {
		line, key := locate(data, ve.raw)
		return &Error{File: name, Line: line, Key: key, Msg: ve.msg}
	}
	return &Error{File: name, Msg: err.Error()}
}

// valueError is returned by custom value decoders, which the TOML library
// does not tell where their value stands; Decode finds it again.
type valueError struct{ raw, msg string }

func (e *valueError) Error() string { return e.msg }

// locate finds the first "key = raw" line and returns its number and dotted
// key (with the enclosing [table] header).
func locate(data []byte, raw string) (int, string) {
	table := ""
	for i, line := range strings.Split(string(data), "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "[") && !strings.HasPrefix(t, "[[") {
			table = strings.Trim(t, "[] ")
			continue
		}
		k, v, ok := strings.Cut(t, "=")
		if ok && strings.HasPrefix(strings.TrimSpace(v), raw) {
			key := strings.TrimSpace(k)
			if table != "" {
				key = table + "." + key
			}
			return i + 1, key
		}
	}
	return 0, ""
}

// scanKeys calls fn with the number and the full dotted key of every
// "key = value" line of data (the key prefixed with its [table]), and with
// the number and name of every [table] header (header true), until fn
// returns false. It reads TOML as the shipped files write it; what it does
// not recognise it skips.
func scanKeys(data []byte, fn func(line int, key string, header bool) bool) {
	table := ""
	for i, line := range strings.Split(string(data), "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "[") {
			table = strings.TrimSpace(strings.Trim(t, "[] "))
			if i := strings.Index(table, "]"); i >= 0 {
				table = strings.TrimSpace(table[:i])
			}
			if !fn(i+1, table, true) {
				return
			}
			continue
		}
		if strings.HasPrefix(t, "#") {
			continue
		}
		k, _, ok := strings.Cut(t, "=")
		if !ok {
			continue
		}
		key := strings.Trim(strings.TrimSpace(k), `"'`)
		if table != "" {
			key = table + "." + key
		}
		if !fn(i+1, key, false) {
			return
		}
	}
}

// keyAtLine returns the full dotted key set on line n of data, or "".
func keyAtLine(data []byte, n int) string {
	found := ""
	scanKeys(data, func(line int, key string, header bool) bool {
		if line == n && !header {
			found = key
		}
		return line < n
	})
	return found
}

// LineOf returns the line of data where the dotted key is set ("mesh.join"
// or "mesh.join[1]", the index ignored), else the line of the [table]
// that would hold it, else 0.
func LineOf(data []byte, key string) int {
	if i := strings.IndexByte(key, '['); i >= 0 {
		key = key[:i]
	}
	table := ""
	if i := strings.LastIndexByte(key, '.'); i >= 0 {
		table = key[:i]
	}
	exact, header := 0, 0
	scanKeys(data, func(line int, k string, isHeader bool) bool {
		switch {
		case !isHeader && k == key:
			exact = line
			return false
		case isHeader && k == table && header == 0:
			header = line
		}
		return true
	})
	if exact > 0 {
		return exact
	}
	return header
}

// KeyError is a value that decoded but makes no sense, found by a
// Validate method: Key is the full dotted key ("teardown.kill_wait"). Parse
// turns every KeyError into an *Error with the file and the line where the
// key is set.
type KeyError struct {
	Key string
	Msg string
}

func (e *KeyError) Error() string { return fmt.Sprintf("key %q: %s", e.Key, e.Msg) }

// KeyErr returns a *KeyError for key.
func KeyErr(key, format string, a ...any) error {
	return &KeyError{Key: key, Msg: fmt.Sprintf(format, a...)}
}

// InFile places err (a *KeyError, or errors joined with errors.Join of
// which some are) in the file name whose content is data: each KeyError
// becomes an *Error with the file, the key's line and the key, each other
// error is prefixed with the file's name.
func InFile(name string, data []byte, err error) error {
	if err == nil {
		return nil
	}
	if name == "" {
		name = "defaults"
	}
	var ke *KeyError
	if !errors.As(err, &ke) {
		return fmt.Errorf("%s: %w", name, err)
	}
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	out := make([]error, 0, len(errs))
	for _, e := range errs {
		var ke *KeyError
		if errors.As(e, &ke) {
			out = append(out, &Error{File: name, Line: LineOf(data, ke.Key), Key: ke.Key, Msg: ke.Msg})
			continue
		}
		out = append(out, fmt.Errorf("%s: %w", name, e))
	}
	return errors.Join(out...)
}

// KeyErrorInFile is InFile for one error about key of the file at path
// (read again to find the line): for checks made after Parse, such as
// loading the key file that a key names.
func KeyErrorInFile(path, key string, err error) error {
	data, _ := os.ReadFile(path)
	return InFile(path, data, &KeyError{Key: key, Msg: err.Error()})
}

// Duration is a time.Duration written in TOML as a Go duration string
// ("90s", "2m30s") or as an integer number of seconds (90).
type Duration struct{ d time.Duration }

// Dur returns a Duration holding v.
func Dur(v time.Duration) Duration { return Duration{v} }

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return d.d }

// UnmarshalText parses "90s"-style strings and plain seconds.
func (d *Duration) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "" {
		return errors.New("empty duration")
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n > int64(1<<63-1)/int64(time.Second) || n < -int64(1<<63-1)/int64(time.Second) {
			return fmt.Errorf("duration %q out of range", s)
		}
		d.d = time.Duration(n) * time.Second
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q (want e.g. \"90s\", \"2m\" or seconds)", s)
	}
	d.d = v
	return nil
}

// MarshalText writes the duration in Go syntax.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.d.String()), nil }

// UnmarshalTOML decodes a raw TOML value: a string goes through UnmarshalText,
// an integer counts seconds.
func (d *Duration) UnmarshalTOML(data []byte) error {
	raw := strings.TrimSpace(string(data))
	if err := d.unmarshalRaw(raw); err != nil {
		return &valueError{raw: raw, msg: err.Error()}
	}
	return nil
}

func (d *Duration) unmarshalRaw(raw string) error {
	switch {
	case strings.HasPrefix(raw, "'") && strings.HasSuffix(raw, "'") && len(raw) >= 2:
		return d.UnmarshalText([]byte(raw[1 : len(raw)-1]))
	case strings.HasPrefix(raw, `"`):
		s, err := strconv.Unquote(raw)
		if err != nil {
			return fmt.Errorf("invalid duration %s", raw)
		}
		return d.UnmarshalText([]byte(s))
	default:
		n, err := strconv.ParseInt(strings.ReplaceAll(raw, "_", ""), 10, 64)
		if err != nil {
			return fmt.Errorf("invalid duration %s (want a string such as \"90s\" or whole seconds)", raw)
		}
		return d.UnmarshalText([]byte(strconv.FormatInt(n, 10)))
	}
}

// Parse decodes data, the content of the file named name, over cfg (the
// defaults) and validates the result; nil data gives the defaults. Errors
// name the file, and the line and key where the TOML decoder knows them.
// Both programs' ParseConfig are this.
func Parse[T any, PT interface {
	*T
	Validate() error
}](name string, data []byte, cfg T) (T, error) {
	if data != nil {
		if err := Decode(name, data, &cfg); err != nil {
			return cfg, err
		}
	}
	if err := PT(&cfg).Validate(); err != nil {
		return cfg, InFile(name, data, err)
	}
	return cfg, nil
}

// LoadWith reads the file at path and hands it to parse; an empty path
// gives parse's defaults. Both programs' LoadConfig are this.
func LoadWith[T any](path string, parse func(name string, data []byte) (T, error)) (T, error) {
	if path == "" {
		return parse("", nil)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		cfg, _ := parse("", nil)
		return cfg, fmt.Errorf("read config: %w", err)
	}
	return parse(path, data)
}

// Size is a number of bytes written in TOML as an integer (65536) or a
// string with a binary unit ("64KiB", "1MiB", "2GiB"; "KB", "MB", "GB"
// are read as the same powers of 1024, as most people mean them, and "B"
// or no unit as bytes).
type Size struct{ n int64 }

// Bytes returns a Size of n bytes.
func Bytes(n int64) Size { return Size{n} }

// N returns the size in bytes.
func (s Size) N() int64 { return s.n }

var sizeUnits = []struct {
	suffix string
	mul    int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"TB", 1 << 40},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40},
	{"B", 1},
}

// UnmarshalText parses "64KiB"-style strings and plain byte counts.
func (s *Size) UnmarshalText(b []byte) error {
	str := strings.TrimSpace(string(b))
	num, mul := str, int64(1)
	for _, u := range sizeUnits {
		if v, ok := strings.CutSuffix(str, u.suffix); ok {
			num, mul = strings.TrimSpace(v), u.mul
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || num == "" {
		return fmt.Errorf("invalid size %q (want e.g. \"64KiB\", \"1MiB\" or a number of bytes)", str)
	}
	if n < 0 {
		return fmt.Errorf("size %q is negative", str)
	}
	if n > (1<<62)/mul {
		return fmt.Errorf("size %q out of range", str)
	}
	s.n = n * mul
	return nil
}

// MarshalText writes the size with the largest binary unit that divides it.
func (s Size) MarshalText() ([]byte, error) {
	for i := 3; i >= 0; i-- {
		u := sizeUnits[i]
		if s.n >= u.mul && s.n%u.mul == 0 {
			return []byte(strconv.FormatInt(s.n/u.mul, 10) + u.suffix), nil
		}
	}
	return []byte(strconv.FormatInt(s.n, 10)), nil
}

// UnmarshalTOML decodes a raw TOML value: a string goes through
// UnmarshalText, an integer counts bytes.
func (s *Size) UnmarshalTOML(data []byte) error {
	raw := strings.TrimSpace(string(data))
	text := raw
	switch {
	case strings.HasPrefix(raw, "'") && strings.HasSuffix(raw, "'") && len(raw) >= 2:
		text = raw[1 : len(raw)-1]
	case strings.HasPrefix(raw, `"`):
		u, err := strconv.Unquote(raw)
		if err != nil {
			return &valueError{raw: raw, msg: fmt.Sprintf("invalid size %s", raw)}
		}
		text = u
	default:
		text = strings.ReplaceAll(raw, "_", "")
	}
	if err := s.UnmarshalText([]byte(text)); err != nil {
		return &valueError{raw: raw, msg: err.Error()}
	}
	return nil
}
