package api

import (
	"strconv"
	"unicode/utf8"

	"github.com/gracewatch/gracewatch/agent/request"
)

// The epilog call runs on the path of every job's end, in a process started
// for that one call, where encoding/json's first use of a type (building its
// encoder by reflection) cost about half a millisecond of the call. The
// epilog's request and its final frame are therefore written and read here
// by hand, byte for byte as encoding/json writes them (a byte that is not
// UTF-8 becomes \ufffd, which every Go release decodes the same; go1.27's
// encoding/json writes the replacement character itself): the tests compare
// both with encoding/json on fuzzed input (TestAppendEpilogRequest,
// FuzzAppendEpilogRequest, FuzzExitFrame). Every other call, and every frame
// that is not the plain exit frame, still goes through encoding/json.

// appendEpilogRequest appends req as encoding/json.Marshal writes it.
func appendEpilogRequest(b []byte, req request.EpilogRequest) []byte {
	b = append(b, `{"argv":`...)
	b = appendStrings(b, req.Argv)
	if len(req.Env) > 0 {
		b = append(b, `,"env":`...)
		b = appendStrings(b, req.Env)
	}
	for _, f := range [...]struct{ key, v string }{{`,"dir":`, req.Dir}, {`,"cgroup":`, req.Cgroup}, {`,"user":`, req.User}} {
		if f.v != "" {
			b = append(b, f.key...)
			b = appendString(b, f.v)
		}
	}
	return append(b, '}')
}

// appendStrings appends a []string as encoding/json does (nil is null).
func appendStrings(b []byte, s []string) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, v := range s {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, v)
	}
	return append(b, ']')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string the way encoding/json.Marshal
// does: HTML-safe (<, > and & escaped), invalid UTF-8 as U+FFFD, U+2028 and
// U+2029 escaped.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// exitFrame reads the plain exit frame the agent writes,
// {"stream":"exit","status":N} with N in 0-255 written without sign or
// leading zeros, and reports ok; any other line is not for this fast path
// (ok false) and goes to encoding/json.
func exitFrame(line []byte) (status int, ok bool) {
	const prefix, suffix = `{"stream":"exit","status":`, `}`
	n := len(line) - len(prefix) - len(suffix)
	if n < 1 || n > 3 || string(line[:len(prefix)]) != prefix || string(line[len(line)-len(suffix):]) != suffix {
		return 0, false
	}
	digits := line[len(prefix) : len(line)-len(suffix)]
	if digits[0] == '0' && n > 1 {
		return 0, false
	}
	for _, d := range digits {
		if d < '0' || d > '9' {
			return 0, false
		}
	}
	v, err := strconv.Atoi(string(digits))
	if err != nil || v > 255 {
		return 0, false
	}
	return v, true
}
