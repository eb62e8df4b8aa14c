// Package jsonbody reads the JSON that people and programs hand to
// gracewatch (the agent's and the aggregator's request bodies, a Flux
// resource set R, the agent's epilog frames) and says what is wrong with it
// in one classification: empty, truncated, not JSON, not an object, a field
// of the wrong type, an unknown field, data after the object. Each caller
// words the kinds in its own terms (its API's error body, a CLI message);
// which encoding/json error is which kind is decided here, once.
package jsonbody

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Kind is what is wrong with a JSON input.
type Kind int

const (
	// Empty: nothing but white space, no JSON value at all.
	Empty Kind = iota + 1
	// Truncated: the input ends inside its value.
	Truncated
	// Syntax: the input is not JSON (Offset, Detail).
	Syntax
	// NotObject: valid JSON, but not the object wanted (Got).
	NotObject
	// WrongType: a field's value has the wrong type (Field, Want, Got,
	// Offset).
	WrongType
	// UnknownField: a field the object does not take (Field).
	UnknownField
	// Trailing: data after the object (Offset).
	Trailing
	// Other: anything else encoding/json returned (Detail).
	Other
	// Read: reading the input failed (Err: the reader's error).
	Read
)

// Error is a classified JSON error.
type Error struct {
	Kind Kind
	// Offset is a byte offset in the input: of the syntax error (Syntax),
	// after the value of the wrong type (WrongType), the input's end
	// (Truncated; 0 when the caller had none), or just past the first token
	// after the object (Trailing).
	Offset int64
	// Field is the field's dotted path (WrongType) or its name, unquoted
	// (UnknownField); a client chooses it, so it may be empty, long or not
	// UTF-8.
	Field string
	// Want is what the field takes, as a JSON author says it ("a string",
	// "a number"): WrongType.
	Want string
	// Got is what the input had ("number", "array"): NotObject, WrongType.
	Got string
	// Detail is encoding/json's message without its "json: " prefix:
	// Syntax, Other.
	Detail string
	// Err is the error encoding/json or the reader returned.
	Err error
}

func (e *Error) Error() string {
	switch e.Kind {
	case Empty:
		return "empty input: want a JSON object"
	case Truncated:
		return "truncated JSON"
	case Syntax:
		return fmt.Sprintf("invalid JSON at offset %d: %s", e.Offset, e.Detail)
	case NotObject:
		return "want a JSON object, got " + e.Got
	case WrongType:
		return fmt.Sprintf("%s: want %s, got %s", e.Field, e.Want, e.Got)
	case UnknownField:
		return "unknown field " + strconv.Quote(e.Field)
	case Trailing:
		return "trailing data after the JSON object"
	case Read:
		return e.Err.Error()
	}
	return e.Detail
}

func (e *Error) Unwrap() error { return e.Err }

// Decode decodes exactly one JSON object from r into v: no unknown field,
// nothing but white space after it. Every error is an *Error; one of r
// itself is of Kind Read, with r's error as Err (an *http.MaxBytesError
// where r is an http.MaxBytesReader: the caller's 413).
func Decode(r io.Reader, v any) error {
	cr := &countingReader{r: r}
	dec := json.NewDecoder(cr)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if cr.err != nil && errors.Is(err, cr.err) {
			return &Error{Kind: Read, Err: err}
		}
		// A truncated input was read to its end: its length is where it
		// stops (the decoder's InputOffset is that of its last whole token).
		return Classify(err, cr.n)
	}
	if _, err := dec.Token(); err != io.EOF {
		if cr.err != nil && errors.Is(err, cr.err) {
			return &Error{Kind: Read, Err: err}
		}
		if err == nil {
			err = errTrailing
		}
		return &Error{Kind: Trailing, Offset: dec.InputOffset(), Err: err}
	}
	return nil
}

var errTrailing = errors.New("a JSON value after the object")

// countingReader counts the bytes read and keeps the reader's own error
// (other than its end, which encoding/json reads as the input's end).
type countingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		c.err = err
	}
	return n, err
}

// Classify says which Kind err, returned by encoding/json, is. offset is
// the input's length, for Truncated (0 where unknown: json.Unmarshal).
func Classify(err error, offset int64) *Error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return &Error{Kind: Empty, Err: err}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &Error{Kind: Truncated, Offset: offset, Err: err}
	case errors.As(err, &syn):
		return &Error{Kind: Syntax, Offset: syn.Offset, Detail: detail(syn), Err: err}
	case errors.As(err, &typ):
		if typ.Field == "" {
			return &Error{Kind: NotObject, Got: typ.Value, Err: err}
		}
		return &Error{Kind: WrongType, Field: typ.Field, Want: JSONType(typ.Type.String()), Got: typ.Value,
			Offset: typ.Offset, Err: err}
	}
	// DisallowUnknownFields has no typed error: `json: unknown field "x"`,
	// the name quoted with %q.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if uq, err := strconv.Unquote(name); err == nil {
			name = uq
		}
		return &Error{Kind: UnknownField, Field: name, Err: err}
	}
	return &Error{Kind: Other, Detail: detail(err), Err: err}
}

func detail(err error) string { return strings.TrimPrefix(err.Error(), "json: ") }

// JSONType names a Go type the way a JSON author thinks of it: "a string",
// "a number", "a list".
func JSONType(goType string) string {
	switch {
	case strings.HasPrefix(goType, "[]uint8"):
		return "a base64 string"
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	case strings.Contains(goType, "float"), strings.Contains(goType, "int"):
		return "a number"
	case strings.HasSuffix(goType, "string"):
		return "a string"
	case strings.HasSuffix(goType, "bool"):
		return "true or false"
	case strings.HasPrefix(goType, "map["):
		return "an object"
	}
	return "an object"
}
